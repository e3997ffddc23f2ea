"""The pieces of a Hugging Face model folder in another tool's quantized layout: config.json + safetensors shards.

:class:`Shards` names finished safetensors files like transformers' own (``model.safetensors``, or
``model-00001-of-00003.safetensors`` + ``model.safetensors.index.json``) and writes ``config.json``;
:func:`checkpoint_blocks` turns a model (or one piece of it) into blocks of checkpoint tensors (a packed layer's
format tensors, or a float module's own parameters); :func:`check_architecture` and :func:`refuse_experts` refuse
what ``config.json`` could not describe. The writer (:mod:`.hf_writer`) drives them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from slimkit.engines.quantization.lowbit.linear import PackedLinear
from slimkit.formats.kinds import FormatError, few_names
from slimkit.formats.scheme import WeightScheme

DEFAULT_SHARD_BYTES = 2 * 2**30
SAFE_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"


class Shards:
    """The safetensors shards of a Hugging Face folder, taken one finished file at a time, then named.

    ``open()`` once, :meth:`add_shard` for each file, ``close(config)`` names the shards, writes the index when
    there are several, and ``config.json``. The folder must be new (the caller makes it atomic).
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        self._shards: list[list[str]] = []
        self._total = 0
        self._seen: set[str] = set()

    def open(self) -> Shards:
        """Create the folder (it may exist empty)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        return self

    def add_shard(self, file: str | os.PathLike, names: list[str], nbytes: int) -> None:
        """Take a finished safetensors ``file`` holding tensors ``names`` (``nbytes`` of data) as the next shard."""
        repeated = self._seen.intersection(names)
        if repeated:
            raise FormatError(f"Checkpoint tensor {sorted(repeated)[0]!r} written twice.")
        self._seen.update(names)
        os.replace(file, self.folder / f".shard-{len(self._shards):05d}.safetensors")
        self._shards.append(list(names))
        self._total += int(nbytes)

    def close(self, config: dict[str, Any]) -> list[str]:
        """Name the shards, write the index (several shards) and ``config.json``; return the weight file names."""
        n = len(self._shards)
        names = [SAFE_NAME] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
        weight_map = {}
        for i, (name, keys) in enumerate(zip(names, self._shards, strict=True)):
            os.replace(self.folder / f".shard-{i:05d}.safetensors", self.folder / name)
            weight_map.update(dict.fromkeys(keys, name))
        if n > 1:
            index = {"metadata": {"total_size": self._total}, "weight_map": dict(sorted(weight_map.items()))}
            (self.folder / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
        (self.folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        return names


def _prefixed(prefix: str, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {f"{prefix}.{k}" if prefix else k: v for k, v in tensors.items()}


def checkpoint_blocks(model: nn.Module, layer_tensors: Callable[[PackedLinear, WeightScheme, torch.dtype], dict],
                      schemes: dict[str, WeightScheme], prefix: str = "",
                      dtype: torch.dtype | None = None,
                      skip: frozenset[str] = frozenset()) -> Iterator[dict[str, torch.Tensor]]:
    """One block of checkpoint tensors per module: packed layers by ``layer_tensors``, float modules as they are.

    Tied parameters (an lm_head sharing the embedding) are written once, under their first name. Non-persistent
    buffers (rotary tables) are left out, as transformers does. ``model`` may be one piece of a model (a decoder
    block) at dotted ``prefix``: names then start with it, ``schemes`` and ``skip`` (full tensor names left out, e.g.
    a weight tied to one another piece holds) use full names, and ``dtype`` is the whole model's float dtype.
    """
    seen: set[int] = set()
    if dtype is None:
        dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    for local, module in model.named_modules():
        name = f"{prefix}.{local}" if prefix and local else (prefix or local)
        if isinstance(module, PackedLinear):
            yield _prefixed(name, layer_tensors(module, schemes[name], dtype))
            continue
        if any(name.startswith(f"{p}.") for p in schemes):  # inside a packed layer (none today)
            continue
        local = {}
        persistent = {k for k in module._buffers if k not in module._non_persistent_buffers_set}
        for key, tensor in [*module._parameters.items(), *((k, module._buffers[k]) for k in persistent)]:
            if tensor is None or id(tensor) in seen or f"{name}.{key}" in skip:
                continue
            seen.add(id(tensor))
            local[key] = tensor
        if local:
            yield _prefixed(name, local)


def hf_config(model: nn.Module, quantization_config: dict[str, Any]) -> dict[str, Any]:
    """The model's Hugging Face config as a dict, with ``quantization_config`` set (and its class named)."""
    config = getattr(model, "config", None)
    if config is None or not callable(getattr(config, "to_dict", None)):
        raise FormatError(f"{type(model).__name__} has no Hugging Face config; checkpoint formats describe a "
                          "transformers model (config.json). Export a transformers causal LM.")
    data = config.to_dict()
    data.pop("quantization_config", None)
    data["architectures"] = [type(model).__name__]
    data["quantization_config"] = quantization_config
    return data


def refuse_experts(names: list[str], fmt: str, option: str = "exclude") -> None:
    """A FormatError when mixture-of-experts modules ``names`` are (or will be) quantized: ``fmt`` cannot hold them.

    transformers and vLLM read a quantized MoE checkpoint as one packed matrix per expert under their own names;
    slimkit packs the fused experts tensors its modules hold, which those runtimes would not find.
    """
    if names:
        raise FormatError(
            f"Cannot save this model as {fmt}: its mixture-of-experts modules ({few_names(names)}) are quantized "
            "as fused experts tensors, "
            f"and {fmt} readers (transformers, vLLM) expect one packed matrix per expert, which slimkit does not "
            f"write yet. Save in slimkit's format (or GGUF with llama_cpp), or keep the experts in float "
            f"({option}=[..., '*.experts']).")


def check_architecture(model: nn.Module, schemes: dict[str, WeightScheme]) -> None:
    """Refuse a model whose tensors no longer fit its own config (pruned, or layers replaced by other quantizers).

    The architecture is rebuilt from the config on the meta device; every float tensor must have the same name and
    shape, every packed layer must stand where the config has a Linear of the same shape.
    """
    config = getattr(model, "config", None)
    try:
        with torch.device("meta"):
            fresh = type(model)(config)
    except Exception as exc:  # noqa: BLE001 - any init failure means the config does not describe the model
        raise FormatError(f"{type(model).__name__} cannot be rebuilt from its own config ({exc}); the checkpoint's "
                          "config.json would not describe it.") from exc
    expected = dict(fresh.named_modules())
    problems = []
    for name, module in model.named_modules():
        other = expected.get(name)
        if isinstance(module, PackedLinear):
            if not isinstance(other, nn.Linear) or (other.in_features, other.out_features) != (
                    module.in_features, module.out_features):
                problems.append(f"{name} (packed [{module.out_features}, {module.in_features}]) is no Linear of that "
                                "shape in the config's architecture")
            continue
        if other is None:
            if not any(name.startswith(f"{p}.") for p in schemes):
                problems.append(f"{name} ({type(module).__name__}) is not in the config's architecture")
            continue
        if type(other) is nn.Linear and type(module) is not nn.Linear:
            problems.append(f"{name} is a {type(module).__name__}, which the format has no layout for")
            continue
        for key, t in module.named_parameters(recurse=False):
            ref = getattr(other, key, None)
            if not isinstance(ref, torch.Tensor) or tuple(ref.shape) != tuple(t.shape):
                problems.append(f"{name}.{key} has shape {tuple(t.shape)}, the config gives "
                                f"{None if ref is None else tuple(ref.shape)}")
    if problems:
        raise FormatError(f"The model does not match its own config, so config.json cannot describe it: "
                          f"{'; '.join(problems[:4])}{' ...' if len(problems) > 4 else ''}. Checkpoint formats "
                          "hold an unchanged transformers architecture whose Linear layers are packed by a low-bit "
                          "quantizer (no pruning, no other quantizer).")


__all__ = ["Shards", "check_architecture", "checkpoint_blocks", "hf_config", "refuse_experts"]
