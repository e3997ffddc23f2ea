"""Models from anywhere: a zoo name, a local Hugging Face folder, or a ``package.module:factory``.

:func:`load_source` turns what a user types after ``--model`` into a :class:`ZooModel` (model, example inputs,
tokenizer, task, offline data). The model is tagged with how to rebuild it, so a save made from it reloads:

* a zoo name rebuilds through the zoo;
* a Hugging Face folder rebuilds from the config recorded in the save (no code is imported);
* a factory is user code: the save records ``"package.module:factory"``, and loading calls it only when the
  caller opts in (``trust_code=True`` / ``--trust-code``, like transformers' ``trust_remote_code``).
"""

from __future__ import annotations

import importlib
import json
import os
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from slimkit.errors import ConfigError, SaveLoadError
from slimkit.zoo._hf import random_tokens, transformers_module
from slimkit.zoo.registry import ZooModel, load, names

_FACTORY_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
#: attribute a factory-built model carries: the ``"package.module:factory"`` that rebuilds it
FACTORY_ATTR = "slimkit_factory"


def is_factory(source: str) -> bool:
    """Whether ``source`` has the ``package.module:factory`` form."""
    return bool(_FACTORY_RE.match(source))


def call_factory(spec: str) -> Any:
    """Import ``package.module`` and call ``factory()``; clear errors for a missing module or attribute."""
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"Model factory {spec!r}: module {module_name!r} cannot be imported ({exc}); make it "
                          "importable (install it or run from its folder).") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f"Model factory {spec!r}: {module_name} has no callable {attr!r}.")
    return factory()


def _from_factory(spec: str) -> ZooModel:
    made = call_factory(spec)
    if isinstance(made, ZooModel):
        zoo_model = made
    elif isinstance(made, nn.Module):
        zoo_model = ZooModel(made, None, spec)
    elif isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], nn.Module):
        zoo_model = ZooModel(made[0], made[1], spec)
    else:
        raise ConfigError(f"Model factory {spec!r} returned {type(made).__name__}; it must return an nn.Module, "
                          "a (module, example_inputs) pair or a slimkit.zoo.ZooModel.")
    setattr(zoo_model.model, FACTORY_ATTR, spec)
    zoo_model.name = spec
    return zoo_model


SHARD_INDEX = "model.safetensors.index.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
#: the files that mean a folder holds a tokenizer: the one list every place that looks for one uses
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def has_tokenizer(folder: Path) -> bool:
    """Whether ``folder`` holds a tokenizer (one of :data:`TOKENIZER_FILES`)."""
    return any((folder / f).is_file() for f in TOKENIZER_FILES)


def safetensors_files(folder: Path) -> list[Path]:
    """The safetensors weight files of a Hugging Face folder (its shard index's, else every ``*.safetensors``).

    A folder holding only PyTorch pickle files (``pytorch_model.bin``, ``*.pt``) is refused with the command that
    converts it: slimkit never unpickles weights. Returns ``[]`` when the folder holds no weights at all.
    """
    index = folder / SHARD_INDEX
    if index.is_file():
        try:
            return [folder / n for n in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"{index} is not a valid shard index ({exc}).") from exc
    files = sorted(folder.glob("*.safetensors"))
    if files:
        return files
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise ConfigError(
            f"{folder} holds its weights only as PyTorch pickle files ({', '.join(pickles[:4])}), which slimkit "
            "never unpickles (loading a pickle can run arbitrary code). Convert the folder once to safetensors, if "
            "you trust the files: python -c \"from transformers import AutoModelForCausalLM as M; "
            f"M.from_pretrained('{folder}', use_safetensors=False).save_pretrained('{folder}-safetensors')\" "
            "and pass the new folder.")
    return []


def folder_architecture(folder: Path, fix: str) -> tuple[Any, type, str]:
    """``(config, transformers class, class name)`` that ``folder/config.json`` names; a ConfigError saying ``fix``."""
    transformers = transformers_module(f"model folder {folder}")
    try:
        config = transformers.AutoConfig.from_pretrained(str(folder))
    except Exception as exc:  # noqa: BLE001 - transformers raises OSError/ValueError/KeyError for unusable folders
        raise ConfigError(f"{folder} is not a Hugging Face model folder transformers can read ({exc}).") from exc
    architecture = (getattr(config, "architectures", None) or [None])[0]
    cls = getattr(transformers, architecture, None) if architecture else None
    if cls is None:
        raise ConfigError(f"{folder}/config.json names architecture {architecture!r}, which this transformers does "
                          f"not have; {fix}.")
    return config, cls, architecture


def _from_hf_folder(folder: Path, dtype: Any = None) -> ZooModel:
    transformers = transformers_module(f"model folder {folder}")
    if not safetensors_files(folder):
        raise ConfigError(f"{folder} has no *.safetensors weights (and no {SHARD_INDEX}).")
    config, cls, architecture = folder_architecture(
        folder, "add 'architectures' to config.json or pass a factory (package.module:fn)")
    model = cls.from_pretrained(str(folder), dtype=dtype or "auto", use_safetensors=True).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder)) if has_tokenizer(folder) else None
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    inputs = {"input_ids": random_tokens(vocab, 2, 16, 0)} if vocab else None
    task = "causal_lm" if architecture.endswith("ForCausalLM") else ""
    data = "PyDocText" if tokenizer is not None and task == "causal_lm" else None
    return ZooModel(model, inputs, str(folder), tokenizer=tokenizer, task=task, data=data,
                    meta={"architecture": architecture})


def load_source(source: str | os.PathLike, dtype: Any = None) -> ZooModel:
    """The model ``source`` names: a zoo name, a local Hugging Face folder, or ``package.module:factory``.

    A factory returns an ``nn.Module``, a ``(module, example_inputs)`` pair, or a ``ZooModel``; typing its
    name is the opt-in to run it. Unknown sources list the three forms. ``dtype`` (a torch dtype) loads a
    Hugging Face folder in that dtype (default: the one it is stored in).
    """
    text = str(source)
    if text in names():
        return load(text)
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"{path} has no config.json, so it is not a Hugging Face model folder.")
        return _from_hf_folder(path, dtype)
    if is_factory(text):
        return _from_factory(text)
    raise ConfigError(f"Unknown model {text!r}: give a zoo name ({', '.join(names())}), a local Hugging Face "
                      "folder (config.json + weights), or package.module:factory returning a torch module.")


def rebuild_from_factory(spec: str, trust_code: bool) -> torch.nn.Module:
    """Rebuild a factory-made base on load, only with the caller's consent to import and run its code."""
    if not trust_code:
        module = spec.partition(":")[0]
        raise SaveLoadError(
            f"This model was built by the factory {spec!r}; loading it means importing and running {module!r}. "
            "Pass trust_code=True to from_pretrained (or --trust-code on the command line) if you trust that "
            "code, or pass model=<a fresh instance>."
        )
    made = call_factory(spec)
    model = made.model if isinstance(made, ZooModel) else made[0] if isinstance(made, tuple) else made
    if not isinstance(model, nn.Module):
        raise SaveLoadError(f"Factory {spec!r} did not return a torch module (got {type(model).__name__}).")
    return model
