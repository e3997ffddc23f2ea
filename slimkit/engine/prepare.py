"""One preparation step: every decision a smash makes, made once, before anything runs or is written.

:func:`prepare` returns a frozen :class:`Prepared`: the algorithms in stage order, the device (``"auto"`` resolved
once), the output format the recipe was checked for, whether a folder streams and why, and a resolved *copy* of the
config (the user's is never changed). :meth:`Prepared.bind` adds what the model brings and checks the model.
``smash``, ``smash_folder``, the streaming plan and ``slimkit smash`` run from a bound Prepared; nothing after it
changes the config, so the config a save records says what ran, device included.
"""

from __future__ import annotations

import copy
import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from slimkit.config.smash_config import SmashConfig
from slimkit.core import registry
from slimkit.core.contract import SlimkitAlgorithm
from slimkit.core.devices import is_available
from slimkit.engine.smashed_model import SmashedModel
from slimkit.engine.stream import memory
from slimkit.engine.stream.checkpoint import Checkpoint
from slimkit.errors import ConfigError, MissingComponentError, MissingPackageError, ModelNotSupportedError
from slimkit.formats import SLIMKIT, export_format, get_format
from slimkit.zoo.sources import has_tokenizer

__all__ = ["Prepared", "in_memory_bytes", "parse_dtype", "prepare"]

logger = logging.getLogger(__name__)

#: the in-memory path holds about this many times the model (its weights, a quantizer's working copies)
IN_MEMORY_FACTOR = 1.5
_DTYPE_NAMES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
                "half": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
_COMPONENT_FIX = {"tokenizer": "a tokenizer; add one with cfg.add_tokenizer(...)",
                  "processor": "a processor; add one with cfg.add_processor(...)",
                  "data": "a dataset; add one with cfg.add_data(...)"}


def parse_dtype(value: str | torch.dtype | None) -> torch.dtype | None:
    """``"bf16"``/``"bfloat16"``/``torch.bfloat16``... -> the torch dtype (None stays None)."""
    key = None if value is None else str(value).lower().removeprefix("torch.")
    if key is not None and key not in _DTYPE_NAMES:
        raise ConfigError(f"dtype {value!r} is not supported; use one of float32, float16, bfloat16 (or fp32, fp16, "
                          "bf16).")
    return None if key is None else _DTYPE_NAMES[key]


def in_memory_bytes(checkpoint: Checkpoint, dtype: torch.dtype | None = None) -> int:
    """Bytes an in-memory smash of ``checkpoint`` would need: its weights in ``dtype`` times a working factor."""
    return int(IN_MEMORY_FACTOR * checkpoint.nbytes(checkpoint.tensors, dtype or checkpoint.dtype()))


@dataclass(frozen=True)
class Prepared:
    """What a smash will do (see :func:`prepare`); ``config`` is the resolved copy that runs and is saved."""

    config: SmashConfig
    algorithms: tuple[str, ...]  # stage order
    device: str
    output_format: str  # a name in slimkit.formats.FORMATS, the recipe checked for it
    stream: bool
    reason: str  # why ``stream`` is what it is, in words
    checkpoint: Checkpoint | None = None  # a folder's headers
    dtype: torch.dtype | None = None  # a folder's model dtype (asked for, else as stored)
    data: Any = None  # a dataset to add when an algorithm needs one and neither config nor model brings one
    experimental: bool = False
    added: tuple[str, ...] = ()  # what bind added to the copy ("tokenizer", "example inputs", "dataset ...")
    bound: bool = False

    def bind(self, model: Any, defaults: Any = None) -> Prepared:
        """A new copy with what ``model`` brings, and the model checked; ``prepare`` binds a model it is given.

        ``defaults`` (a :class:`slimkit.zoo.ZooModel`) brings example inputs, a tokenizer and its data; a folder its
        tokenizer. Checks: the format's (group sizes vs widths), components, ``model_check_fn`` (not experimental).
        """
        if isinstance(model, SmashedModel):
            raise ConfigError("This model is already smashed; smash the original model with a SmashConfig that holds "
                              "every algorithm you want.")
        if not isinstance(model, torch.nn.Module):
            raise ModelNotSupportedError(f"smash() needs a torch.nn.Module, got {type(model).__name__}.")
        config, added, folder = _copy(self.config), [], self.checkpoint.folder if self.checkpoint else None
        brought = config.tokenizer is not None or getattr(defaults, "tokenizer", None) is not None
        if not brought and folder is not None and has_tokenizer(folder):  # the one place a folder's tokenizer is added
            config.add_tokenizer(str(folder))
            added.append("tokenizer")
        added += config.add_model_defaults(defaults, data=self.data)
        get_format(self.output_format).check_model_recipe(model, config)  # group size vs widths, before quantizing
        for name in self.algorithms:
            cls = registry.get(name)
            for component, needed in (("tokenizer", cls.tokenizer_required), ("processor", cls.processor_required),
                                      ("data", cls.dataset_required)):
                if needed and getattr(config, component) is None:
                    raise MissingComponentError(f"{name} needs {_COMPONENT_FIX[component]} before smash().")
        for name in self.algorithms:
            algo = registry.get(name)()
            if not self.experimental and not algo.model_check_fn(model):
                raise ModelNotSupportedError(
                    f"{name} does not support this model ({type(model).__name__}). {algo.model_check_reason()} "
                    "Pass experimental=True to smash() to try anyway.")
        return replace(self, config=config, added=tuple(added), bound=True)


def prepare(
    model_or_folder: Any,
    config: SmashConfig,
    *,
    stream: bool | None = None,
    output_format: str = SLIMKIT,
    dtype: str | torch.dtype | None = None,
    memory_budget: int | str | None = None,
    data: Any = None,
    defaults: Any = None,
    experimental: bool = False,
) -> Prepared:
    """Check ``config`` once and decide what a smash of ``model_or_folder`` needs; nothing is changed or written.

    ``model_or_folder``: an ``nn.Module`` (bound at once, with ``defaults``), a Hugging Face model folder (headers
    read; bind the model once built), or None (bind later). Refused in order: unknown algorithm, device, incompatible
    combination, missing package, a recipe ``output_format`` cannot hold, a folder's stream refusals. A folder
    streams when ``stream`` says so, or (None) when every algorithm can and an in-memory smash would need more than
    ``memory_budget`` (default: half the available memory).
    """
    if not isinstance(config, SmashConfig):
        raise ConfigError(f"smash() needs a SmashConfig, got {type(config).__name__}; build one with SmashConfig().")
    names = config.get_active_algorithms()
    classes = {n: registry.get(n) for n in names}  # unknown names raise with the valid list
    device = _device(config, classes)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            ok, why = registry.compatible(a, b)
            if not ok:
                raise ConfigError(f"{a} and {b} cannot be combined: {why}. Remove one of them from the SmashConfig.")
    for n, cls in classes.items():
        try:
            cls().import_algorithm_packages()
        except ImportError as exc:
            extra = f"pip install 'slimkit[{cls.extra}]'" if cls.extra else f"pip install {exc.name or 'the package'}"
            raise MissingPackageError(f"{n} needs a package that is not installed ({exc}). Install it: {extra}") \
                from exc
    export_format(output_format).check_recipe(config)  # an unknown format or a recipe it cannot hold: before any read
    resolved = _copy(config)
    resolved.device = device
    prepared = Prepared(resolved, tuple(names), device, output_format, False, "a model in memory", data=data,
                        experimental=experimental)
    if isinstance(model_or_folder, (str, os.PathLike)):
        return _for_folder(prepared, Path(model_or_folder), stream, parse_dtype(dtype), memory_budget)
    if stream:
        raise ConfigError("Streaming needs a Hugging Face model folder (config.json + *.safetensors); smash a model "
                          "in memory with smash().")
    return prepared if model_or_folder is None else prepared.bind(model_or_folder, defaults)


def _copy(config: SmashConfig) -> SmashConfig:
    """A copy of ``config`` whose algorithm and hyperparameter tables are its own (components are shared)."""
    twin = copy.copy(config)
    twin.__dict__.update({k: dict(v) for k, v in vars(config).items() if isinstance(v, dict)})
    return twin


def _device(config: SmashConfig, classes: dict[str, type[SlimkitAlgorithm]]) -> str:
    """The device the algorithms run on: ``"auto"`` falls back to the CPU for CPU-only algorithms; refusals.

    Any accelerator (CUDA, MPS, XPU, a backend a library registered) is held to ``run_on_cuda``: the algorithms'
    contract has one flag for "runs on an accelerator".
    """
    device = config.device
    accelerator = torch.device(device).type != "cpu"
    cpu_only = sorted(n for n, cls in classes.items() if not cls.run_on_cuda)
    if config.device_auto and accelerator and cpu_only:
        logger.info("device 'auto': running on the CPU because %s run(s) on the CPU only", ", ".join(cpu_only))
        device, accelerator = "cpu", False
    if accelerator and not is_available(device):
        kind = torch.device(device).type
        what = "CUDA GPU" if kind == "cuda" else f"{kind} device"
        raise ConfigError(f"SmashConfig device is {device!r} but no {what} is available; set cfg.device = 'cpu'.")
    other = "cpu" if accelerator else "cuda"
    for n, cls in classes.items():
        if not (cls.run_on_cuda if accelerator else cls.run_on_cpu):
            raise ConfigError(
                f"{n} does not run on {device}. It runs on {other} only; set cfg.device = {other!r} or pick another "
                f"{cls.group} (`slimkit algorithms` lists devices).")
    return device


def _stream_refusal(names: tuple[str, ...]) -> str | None:
    """Why these algorithms cannot run on a model streamed block by block (None: they can)."""
    steps = [n for n in registry.names() if registry.get(n).stream_step is not SlimkitAlgorithm.stream_step]
    exporters = [n for n in registry.names() if registry.get(n).stream_format is not None]
    other = next((n for n in names if n not in steps + exporters), None)
    if other is not None:
        return (f"{other} cannot run on a model streamed block by block. Streaming runs the block-wise quantizers "
                f"({', '.join(steps)}), optionally with an exporter that writes the result ({', '.join(exporters)}); "
                "smash in memory instead (--no-stream).")
    ours = [n for n in names if n in steps]
    return None if len(ours) == 1 else (f"Streaming needs exactly one block-wise quantizer ({', '.join(steps)}) in "
                                        f"the SmashConfig; it has {len(ours)}: {list(names)}.")


def _for_folder(prepared: Prepared, folder: Path, stream: bool | None, dtype: torch.dtype | None,
                memory_budget: int | str | None) -> Prepared:
    """The folder's facts (headers, dtype) and whether it streams, with the reason."""
    checkpoint = Checkpoint(folder)  # refuses pickle-only and broken folders before anything else
    dtype = dtype or checkpoint.dtype()
    refusal = _stream_refusal(prepared.algorithms)
    if stream is not None:
        reason = f"{'streaming' if stream else 'loading'} {folder} {'block by block' if stream else 'whole'} (asked)"
    elif refusal is not None:
        reason = f"loading {folder} whole: {refusal.split('.')[0]}"
    else:
        need, budget = in_memory_bytes(checkpoint, dtype), memory_budget is not None
        has = memory.parse_bytes(memory_budget) if budget else memory.available_bytes()
        stream = bool(has) and need > (has if budget else has // 2)
        reason = (f"{folder} would need about {memory.format_bytes(need)} in memory ({memory.format_bytes(has)} "
                  f"{'memory budget' if budget else 'available'}): "
                  + ("streaming it block by block (--no-stream to load it whole)" if stream else "loading it whole"))
    if stream and refusal is not None:
        raise ConfigError(refusal)
    if stream and dtype not in _DTYPE_NAMES.values():
        raise ConfigError(f"{folder} stores its weights as {dtype}; pass dtype='bfloat16', 'float16' or 'float32' to "
                          "choose the model's dtype.")
    return replace(prepared, stream=bool(stream), reason=reason, checkpoint=checkpoint, dtype=dtype)
