"""CTranslate2 behind torch-shaped modules: conversion of a Hugging Face model, and the shared base of the runners.

c_generate, c_translate and c_whisper convert the model with CTranslate2's own Transformers converter (weights
int8 / float16 / float32 in CTranslate2's ``model.bin`` format, no pickle), then run it with CTranslate2. Token ids
go in and out as ids: the converted folder's vocabulary maps them to CTranslate2's token strings, so the results are
the ids of the model's own tokenizer. :class:`CT2Generator` (causal LMs) lives here; the encoder-decoder runners in
:mod:`slimkit.algorithms.compilation._ctranslate2_seq2seq`.
"""

from __future__ import annotations

import copy
import json
import shutil
import sys
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import torch
from ConfigSpace import OrdinalHyperparameter, UniformIntegerHyperparameter
from torch import nn
from transformers import AutoConfig
from transformers.modeling_outputs import CausalLMOutput

from slimkit.core.contract import SaveFn, SlimkitCompiler, SmashConfigPrefixWrapper
from slimkit.errors import ConfigError, MissingPackageError, SaveLoadError

INSTALL = "pip install 'slimkit[ctranslate2]'"
#: Pruna's ``weight_bits`` (8, 16) plus 32 -> CTranslate2's ``quantization`` of the converted weights
QUANTIZATION = {8: "int8", 16: "float16", 32: "float32"}
#: the folder the converted model is saved in, inside a slimkit save
FOLDER = "ctranslate2"
#: the Hugging Face config of the converted model, kept beside CTranslate2's own config.json
HF_CONFIG = "transformers_config.json"
_SAMPLING = ("max_new_tokens", "min_new_tokens", "do_sample", "temperature", "top_k", "top_p")


def import_ctranslate2() -> Any:
    """Import ctranslate2, or raise MissingPackageError naming the extra to install."""
    try:
        import ctranslate2
        from ctranslate2.converters import transformers as _converter  # noqa: F401  (the converter needs it)
    except ImportError as exc:
        raise MissingPackageError(f"CTranslate2 is not installed ({exc}). Install it: {INSTALL}") from exc
    return ctranslate2


def hyperparameters() -> list:
    """Pruna's ``weight_bits`` (with 32 for exact float runs) and the runtime's threads."""
    return [
        OrdinalHyperparameter("weight_bits", [8, 16, 32], default_value=8, meta={
            "desc": "Bits of the converted weights: 8 (int8, computed in int8 on the CPU), 16 (float16; a CPU "
                    "computes it in float32) or 32 (float32). Pruna's default is 16; on a CPU 8 is the fast one."}),
        UniformIntegerHyperparameter("n_threads", 0, 1024, default_value=0, meta={
            "desc": "CTranslate2 threads per batch (intra_threads); 0 uses torch's current thread count."}),
    ]


def loader_for(model: Any) -> Any:
    """CTranslate2's converter entry for ``model``'s config class, or None when it has none (or no config)."""
    config = getattr(model, "config", None)
    if not isinstance(model, nn.Module) or config is None:
        return None
    from ctranslate2.converters.transformers import _MODEL_LOADERS

    return _MODEL_LOADERS.get(type(config).__name__)


def supported_configs() -> str:
    """The configuration classes CTranslate2's converter takes, for refusal messages."""
    from ctranslate2.converters.transformers import _MODEL_LOADERS

    return ", ".join(sorted(_MODEL_LOADERS))


def convert(model: nn.Module, tokenizer: Any, weight_bits: int, folder: Path) -> dict[str, Any]:
    """Convert ``model`` (with its tokenizer's vocabulary) into a CTranslate2 folder; ``model`` stays untouched.

    CTranslate2's loaders free the layers they read, so the converter gets a deep copy. Special tokens the tokenizer
    lacks (the tiny byte tokenizer has no bos / unk) are written as the eos token / an empty string, which
    CTranslate2's config needs as strings.
    """
    ctranslate2 = import_ctranslate2()
    from ctranslate2.converters.transformers import TransformersConverter

    twin = copy.deepcopy(model).float().eval()
    if not hasattr(twin.config, "normalize_before"):  # BART-like loaders read it; transformers dropped it
        twin.config.normalize_before = False
    source = folder / "source"
    source.mkdir(parents=True)
    twin.config.save_pretrained(source)

    class _InMemory(TransformersConverter):
        def load_model(self, model_class: Any, path: str, **kwargs: Any) -> Any:
            return twin

        def load_tokenizer(self, tokenizer_class: Any, path: str, **kwargs: Any) -> Any:
            return tokenizer

    out = folder / FOLDER
    module = sys.modules[TransformersConverter.__module__]
    real_gc = module.gc  # its loaders call gc.collect() per layer (~0.5 s each in a large process); refcounts free them
    module.gc = SimpleNamespace(collect=lambda *args: 0)
    try:
        _InMemory(str(source)).convert(str(out), quantization=QUANTIZATION[weight_bits], force=True)
    except (ValueError, NotImplementedError, KeyError, AttributeError) as exc:
        raise ConfigError(f"CTranslate2 {ctranslate2.__version__} cannot convert this {type(model).__name__} "
                          f"({type(exc).__name__}: {exc}).") from exc
    finally:
        module.gc = real_gc
        shutil.rmtree(source, ignore_errors=True)
    config_file = out / "config.json"
    config = json.loads(config_file.read_text())
    config["bos_token"] = config.get("bos_token") or config.get("eos_token")
    config["unk_token"] = config.get("unk_token") or ""
    config_file.write_text(json.dumps(config, indent=2))
    (out / HF_CONFIG).write_text(model.config.to_json_string())
    return {"bytes": sum(f.stat().st_size for f in out.iterdir()), "quantization": QUANTIZATION[weight_bits],
            "ctranslate2": ctranslate2.__version__}


def temporary_folder(prefix: str) -> Path:
    """A fresh temporary folder (removed when the module that runs from it is collected)."""
    return Path(tempfile.mkdtemp(prefix=prefix))


def copy_folder(module: CT2Module, directory: Path) -> None:
    """Copy the converted model ``module`` runs into ``directory / FOLDER`` (a save)."""
    if not isinstance(module, CT2Module):
        raise SaveLoadError(f"A CTranslate2 algorithm saves a CTranslate2 module, got {type(module).__name__}.")
    try:
        shutil.copytree(module.folder, directory / FOLDER)
    except OSError as exc:
        raise SaveLoadError(f"Cannot copy {module.folder} into the save ({exc}): the converted model this module "
                            "runs was removed. Smash the original model again.") from exc


def saved_folder(directory: Path) -> Path:
    """The converted model inside a save, checked to be complete."""
    folder = directory / FOLDER
    missing = [n for n in ("model.bin", "config.json", HF_CONFIG) if not (folder / n).is_file()]
    if missing:
        raise SaveLoadError(f"{folder} lacks {', '.join(missing)}: the save is incomplete. Copy the whole "
                            "directory, or save the smashed model again.")
    return folder


def _read(file: Path, valid: Callable[[Any], bool], what: str) -> Any:
    """The JSON in ``file``, or a SaveLoadError naming the file when it is unreadable or not ``what``."""
    try:
        value = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SaveLoadError(f"{file} is unreadable ({exc}); save the smashed model again.") from exc
    if not valid(value):
        raise SaveLoadError(f"{file} does not hold {what}: the file was edited or is corrupt.")
    return value


def open_model(runner: Any, folder: Path, n_threads: int) -> Any:
    """CTranslate2's ``runner`` on ``folder`` (CPU); a folder it refuses raises SaveLoadError."""
    try:
        return runner(str(folder), device="cpu", intra_threads=n_threads)
    except (RuntimeError, ValueError, OSError) as exc:
        raise SaveLoadError(f"CTranslate2 cannot load {folder} ({str(exc)[:300]}): model.bin or config.json is "
                            "damaged or was written by another CTranslate2. Save the smashed model again.") from exc


class CT2Module(nn.Module):
    """Base of the CTranslate2 runners: the converted folder, its vocabulary, the Hugging Face config."""

    def __init__(self, folder: str | Path, n_threads: int = 0, owns_folder: bool = False) -> None:
        super().__init__()
        self.folder = Path(folder)
        if owns_folder:
            weakref.finalize(self, shutil.rmtree, self.folder.parent, True)
        self.ctranslate2 = import_ctranslate2()
        self.n_threads = int(n_threads) or torch.get_num_threads()
        vocab = next((self.folder / n for n in ("vocabulary.json", "shared_vocabulary.json", "target_vocabulary.json")
                      if (self.folder / n).is_file()), None)
        if vocab is None:
            raise SaveLoadError(f"{self.folder} has no vocabulary.json: the converted model is incomplete.")
        self.vocabulary: list[str] = _read(vocab, lambda v: isinstance(v, list) and all(isinstance(t, str) for t in v),
                                           "a list of token strings")
        raw = _read(self.folder / HF_CONFIG, lambda v: isinstance(v, dict) and isinstance(v.get("model_type"), str),
                    "a Hugging Face config with its model_type")
        try:
            self.config = AutoConfig.for_model(raw.pop("model_type"), **raw)
        except (ValueError, TypeError, KeyError) as exc:
            raise SaveLoadError(f"{self.folder / HF_CONFIG} is not a config transformers can read ({exc}).") from exc
        eos = self.config.eos_token_id
        self.eos_token_id = int(eos[0] if isinstance(eos, list) else eos if eos is not None else 0)

    def tokens(self, ids: list[int]) -> list[str]:
        """CTranslate2's token strings of token ids (a ConfigError names an id outside the vocabulary)."""
        size = len(self.vocabulary)
        bad = [i for i in ids if not 0 <= i < size]
        if bad:
            raise ConfigError(f"Token id {bad[0]} is outside the converted model's vocabulary of {size} tokens.")
        return [self.vocabulary[i] for i in ids]

    def extra_repr(self) -> str:
        """Show the converted folder and the threads."""
        return f"folder={str(self.folder)!r}, n_threads={self.n_threads}"


def rows(input_ids: Any, attention_mask: Any, what: str) -> list[list[int]]:
    """The token-id rows of ``input_ids`` ``[batch, seq]`` without the positions where ``attention_mask`` is 0."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() not in (1, 2):
        raise ConfigError(f"{what} needs input_ids as a [batch, seq] tensor; got {type(input_ids).__name__}.")
    ids = input_ids.view(1, -1) if input_ids.dim() == 1 else input_ids
    keep = torch.ones_like(ids, dtype=torch.bool) if attention_mask is None else attention_mask.view_as(ids).bool()
    return [ids[i][keep[i]].tolist() for i in range(ids.shape[0])]


def sampling_options(do_sample: bool, temperature: float, top_k: int, top_p: float) -> dict[str, Any]:
    """CTranslate2's sampling arguments (greedy unless ``do_sample``)."""
    if not do_sample:
        return {"sampling_topk": 1}
    return {"sampling_topk": int(top_k), "sampling_topp": float(top_p), "sampling_temperature": float(temperature)}


def step_callback(prompt: torch.Tensor, streamer: Any, stopping_criteria: Any) -> tuple[Callable, list[int]]:
    """A CTranslate2 step callback feeding a transformers streamer and honouring stopping criteria; new ids."""
    new: list[int] = []

    def on_step(step: Any) -> bool:
        new.append(int(step.token_id))
        if streamer is not None:
            streamer.put(torch.tensor([step.token_id]))
        if stopping_criteria:
            so_far = torch.cat([prompt, torch.tensor([new], dtype=prompt.dtype)], dim=1)
            return bool(any(bool(c(so_far, None).all()) for c in stopping_criteria))
        return False

    return on_step, new


class CT2Generator(CT2Module):
    """A converted causal LM: ``forward`` gives logits ``[batch, seq, vocab]``, ``generate`` continues token ids."""

    def __init__(self, folder: str | Path, n_threads: int = 0, owns_folder: bool = False) -> None:
        super().__init__(folder, n_threads, owns_folder)
        self.generator = open_model(self.ctranslate2.Generator, self.folder, self.n_threads)

    def can_generate(self) -> bool:
        """A causal LM generates (the serve face's /generate uses it)."""
        return True

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                **_: Any) -> CausalLMOutput:
        """Logits ``[batch, seq, vocab]`` float32 (zeros where ``attention_mask`` is 0); other arguments ignored."""
        batch = rows(input_ids, attention_mask, "c_generate")
        ids = input_ids.view(len(batch), -1)
        logits = torch.zeros(ids.shape[0], ids.shape[1], len(self.vocabulary))
        present = [i for i, r in enumerate(batch) if r]
        if present:
            out = torch.from_numpy(np.array(self.generator.forward_batch([self.tokens(batch[i]) for i in present])))
            for j, i in enumerate(present):
                keep = torch.ones(ids.shape[1], dtype=torch.bool) if attention_mask is None else \
                    attention_mask.view_as(ids)[i].bool()
                logits[i, keep] = out[j, : len(batch[i])].float()
        return CausalLMOutput(logits=logits)

    def generate(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                 max_new_tokens: int = 20, min_new_tokens: int = 0, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int = 50, top_p: float = 1.0, streamer: Any = None, stopping_criteria: Any = None,
                 **kwargs: Any) -> torch.Tensor:
        """Prompt + generated ids ``[batch, seq + new]`` (greedy by default; rows ending early padded with eos).

        A transformers ``streamer`` receives the prompt, then each new token; ``stopping_criteria`` are checked
        after every token.
        """
        unknown = sorted(set(kwargs) - {"pad_token_id", "eos_token_id", "use_cache", "generation_config"})
        if unknown:
            raise ConfigError(f"c_generate generate() does not take {unknown}; it takes input_ids, attention_mask, "
                              f"{', '.join(_SAMPLING)}, streamer, stopping_criteria.")
        if input_ids is None:
            raise ConfigError("c_generate generate() needs input_ids ([batch, seq] token ids).")
        batch = rows(input_ids, attention_mask, "c_generate")
        ids = input_ids.view(len(batch), -1)
        options = sampling_options(do_sample, temperature, top_k, top_p)
        if streamer is not None:
            streamer.put(ids.cpu())
        new_rows = []
        for row in batch:
            on_step, new = step_callback(torch.tensor([row], dtype=ids.dtype), streamer, stopping_criteria)
            if max_new_tokens > 0:
                self.generator.generate_batch([self.tokens(row)], max_length=int(max_new_tokens),
                                              min_length=int(min_new_tokens), include_prompt_in_result=False,
                                              callback=on_step, **options)
            new_rows.append(new)
        if streamer is not None:
            streamer.end()
        tail = torch.full((len(batch), max(map(len, new_rows), default=0)), self.eos_token_id, dtype=ids.dtype)
        for i, new in enumerate(new_rows):
            tail[i, : len(new)] = torch.tensor(new, dtype=ids.dtype)
        return torch.cat([ids, tail], dim=1)


class CTranslate2Compiler(SlimkitCompiler):
    """What c_generate, c_translate and c_whisper share: convert, run from the converted folder, save it as it is."""

    references = {"GitHub": "https://github.com/OpenNMT/CTranslate2",
                  "Docs": "https://opennmt.net/CTranslate2/guides/transformers.html"}
    tokenizer_required = True
    run_on_cpu = True
    run_on_cuda = False  # the runner here is CTranslate2's CPU build; CUDA would need its CUDA wheel and cuDNN
    save_fn = SaveFn.ARTIFACTS
    extra = "ctranslate2"
    compatible_algorithms = {"pruner": [], "distiller": [], "quantizer": ["half"], "cacher": [], "batcher": []}
    #: the module that runs the converted model
    runner: ClassVar[type[CT2Module]] = CT2Generator

    def get_hyperparameters(self) -> list:
        """Pruna's weight_bits, and the threads CTranslate2 runs on."""
        return hyperparameters()

    def import_algorithm_packages(self) -> dict[str, Any]:
        """Import ctranslate2 (pip install 'slimkit[ctranslate2]')."""
        return {"ctranslate2": import_ctranslate2()}

    def vocabulary_source(self, smash_config: SmashConfigPrefixWrapper) -> Any:
        """The tokenizer whose vocabulary the converter writes (the processor's for Whisper)."""
        return smash_config.tokenizer

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        folder = temporary_folder(f"slimkit-{self.algorithm_name}-")
        try:
            summary = convert(model, self.vocabulary_source(smash_config), int(smash_config["weight_bits"]), folder)
            module = self.runner(folder / FOLDER, int(smash_config["n_threads"]), owns_folder=True)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        smash_config.state.update(summary)
        return module

    def save_artifacts(self, model: Any, directory: Path, state: dict[str, Any]) -> None:
        """Copy the converted model (CTranslate2's model.bin, config and vocabulary) into ``directory``."""
        copy_folder(model, directory)

    def load_artifacts(self, directory: Path, smash_config: SmashConfigPrefixWrapper,
                       state: dict[str, Any]) -> CT2Module:
        """Run the saved converted model from the save directory (read, never modified)."""
        return self.runner(saved_folder(directory), int(smash_config["n_threads"]))
