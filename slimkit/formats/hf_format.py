"""What compressed-tensors and GPTQ share as checkpoint formats: a transformers folder whose Linears are packed.

:class:`HFCheckpointFormat` holds packed integer layers (:func:`~.scheme.hf_refusals`) and float ones, refuses a
recipe or model it cannot hold before anything runs or is written, exports an in-memory model through the same
writer a streaming run uses (:class:`~.hf_writer.HFCheckpointWriter`, one piece per leaf module), and reads
another tool's folder onto slimkit's packed layers (:func:`~.reader.load_into`). The two subclasses
(:mod:`.compressed_tensors`, :mod:`.gptq`) add their tensors and their ``quantization_config``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from slimkit.core.weights import EXPERTS, weight_of
from slimkit.engines.quantization.lowbit.layers import select_targets
from slimkit.engines.quantization.lowbit.linear import PER_CHANNEL, PackedLinear
from slimkit.formats.base import SLIMKIT_LOAD, CheckpointFormat, llama_cpp_line
from slimkit.formats.hf_checkpoint import check_architecture, refuse_experts
from slimkit.formats.hf_writer import HFCheckpointWriter
from slimkit.formats.kinds import PACKED_EXPERTS, FormatError, LayerKind, few_names, layer_kind, recipe_kinds
from slimkit.formats.scheme import (
    WeightScheme,
    hf_refusals,
    integer_producers,
    model_schemes,
    plain_linears,
    supported_text,
)
from slimkit.formats.writer import WriteContext


def quantizer_options(smash_config: Any) -> tuple[bool, float | None]:
    """``(act_order, damp)`` of the run's quantizer, for a config that records them (False, None without)."""
    act_order, damp = False, None
    for name, kind in ({} if smash_config is None else recipe_kinds(smash_config)).items():
        if kind is not None:
            hps = smash_config.hyperparameters_of(name)
            act_order, damp = bool(hps.get("act_order")), hps.get("damp")
    return act_order, damp


def _pieces(module: nn.Module, prefix: str = "") -> Iterator[tuple[str, nn.Module]]:
    """The modules an in-memory model is written as: leaves, packed layers, and modules holding tensors themselves."""
    if isinstance(module, PackedLinear) or not module._modules or module._parameters or any(
            k not in module._non_persistent_buffers_set for k in module._buffers):
        yield prefix, module
        return
    for name, child in module.named_children():
        yield from _pieces(child, f"{prefix}.{name}" if prefix else name)


class HFCheckpointFormat(CheckpointFormat):
    """A Hugging Face folder (config.json + safetensors) whose packed Linear layers another tool reads."""

    library = "transformers"
    exports = True
    reads = True
    #: ``quant_method`` of the format's ``quantization_config``
    quant_method: str

    def holds(self) -> str:  # noqa: D102
        return supported_text(self.name)

    def refusals(self, kind: LayerKind) -> list[str]:  # noqa: D102
        return hf_refusals(kind, self.name)

    def writer(self, stage: Path, context: WriteContext) -> HFCheckpointWriter:  # noqa: D102
        return HFCheckpointWriter(stage, context, self)

    def loading(self, model: nn.Module) -> list[str]:  # noqa: D102
        return [SLIMKIT_LOAD + " (runs the packed weights on slimkit's CPU kernel; no re-quantization).",
                *self.runtimes(), llama_cpp_line(model, in_slimkit=False)]

    # -------------------------------------------------------------------------------------- the format's own
    def runtimes(self) -> list[str]:
        """The card's lines for the other runtimes that open this format (transformers, vLLM...)."""
        raise NotImplementedError

    def layer_tensors(self, layer: PackedLinear, scheme: WeightScheme, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """One packed layer's tensors in this layout, by local name (``dtype``: the model's float dtype)."""
        raise NotImplementedError

    def quantization_config(self, schemes: dict[str, WeightScheme], group_sizes: dict[str, int], ignore: list[str],
                            smash_config: Any = None) -> dict[str, Any]:
        """The ``quantization_config`` for packed layers ``schemes`` and float Linears ``ignore``."""
        raise NotImplementedError

    def quantized_layers(self, model: nn.Module, qc: dict[str, Any], names: set[str]) -> dict[str, Any]:
        """``{Linear name: how to read it}`` for the stored tensor ``names`` under config ``qc``."""
        raise NotImplementedError

    def layer_from_tensors(self, tensors: dict[str, torch.Tensor], how: Any, name: str, dtype: torch.dtype,
                           notes: list[str]) -> PackedLinear:
        """A PackedLinear from one layer's stored tensors (local names), without re-quantizing."""
        raise NotImplementedError

    # -------------------------------------------------------------------------------------- checks
    def recipe_problems(self, smash_config: Any) -> list[str]:
        """Also refused: algorithms that change the architecture, and a recipe without a low-bit quantizer."""
        kinds = recipe_kinds(smash_config)
        others = [n for n, k in kinds.items() if k is None]
        problems = [f"{', '.join(others)} change the model in ways {self.name} has no place for (it stores an "
                    "unchanged transformers architecture with packed Linear weights)"] if others else []
        if len(others) == len(kinds):
            problems.append(f"no low-bit quantizer: add one of {', '.join(integer_producers())}")
        return problems + super().recipe_problems(smash_config)

    def check_model_recipe(self, model: nn.Module, smash_config: Any) -> None:
        """Refuse, before the quantizer runs, experts it would pack and a group size that does not split the rows.

        The format holds whole groups only (compressed-tensors' forward raises on a partial last group); a model
        whose layers are narrower than one group is fine (one group per row).
        """
        for name, kind in recipe_kinds(smash_config).items():
            if kind is None:
                continue
            exclude = tuple(smash_config.hyperparameters_of(name).get("exclude") or ())
            refuse_experts([t.name for t in select_targets(model, exclude, (EXPERTS,))], self.name, f"{name}_exclude")
            group = kind.group_size or PER_CHANNEL
            if group == PER_CHANNEL:
                continue
            widths = {t.name: int(weight_of(model.get_submodule(t.name)).shape[1])
                      for t in select_targets(model, exclude)}
            bad: dict[int, list[str]] = {}
            for layer, width in widths.items():
                if width > group and width % group:
                    bad.setdefault(width, []).append(layer)
            if bad:
                fits = [g for g in (16, 32, 64, 128, 256) if all(w % g == 0 or w <= g for w in widths.values())]
                parts = [f"{width} input columns ({few_names(names)})" for width, names in bad.items()]
                raise FormatError(f"Cannot save this model as {self.name} with {name}_group_size={group}: "
                                  f"{'; '.join(parts)} do not split into whole groups of {group}. Set "
                                  f"{name}_group_size to {' or '.join(map(str, fits)) if fits else '-1 (per-channel)'}"
                                  f", or exclude those layers. {self.holds()}")

    def check_model(self, model: nn.Module, smash_config: Any = None) -> dict[str, Any]:
        """Check all of ``model`` and return its ``quantization_config``; raises before anything is written."""
        refuse_experts([n for n, m in model.named_modules() if (k := layer_kind(m)) and k.kind == PACKED_EXPERTS],
                       self.name)
        schemes = model_schemes(model, self)
        check_architecture(model, schemes)
        layers = {n: m for n, m in model.named_modules() if isinstance(m, PackedLinear)}
        return self.quantization_config(schemes, {n: m.group_size for n, m in layers.items()}, plain_linears(model),
                                        smash_config)

    # -------------------------------------------------------------------------------------- write and read
    def export(self, model: nn.Module, folder: str | os.PathLike, smash_config: Any = None, tokenizer: Any = None,
               readme: str | None = None, max_shard_bytes: int | None = None) -> dict[str, Any]:
        """Write in-memory ``model`` to ``folder`` in this format, atomically, through the streaming writer.

        The folder gets ``config.json`` with the format's ``quantization_config``, the safetensors shards, the
        generation config, the tokenizer's files (when given) and ``README.md`` (when given). Returns the writer's
        summary (files, bytes, quantization_config, schemes).
        """
        self.check_model(model, smash_config)
        target = Path(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.stage-", dir=target.parent))
        dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
        try:
            writer = self.writer(stage, WriteContext(model, tokenizer, config=smash_config, dtype=dtype))
            if max_shard_bytes is not None:
                writer.max_shard_bytes = max_shard_bytes
            seen: dict[int, str] = {}
            keys = []
            for i, (prefix, module) in enumerate(_pieces(model)):
                tied = {}
                for local, tensor in module.state_dict(keep_vars=True).items():
                    full = f"{prefix}.{local}" if prefix else local
                    if seen.setdefault(id(tensor), full) != full:
                        tied[full] = seen[id(tensor)]
                keys.append(f"{i:06d}")
                writer.write(keys[-1], prefix, module, tied)
            summary = writer.finish(keys)
            writer.publish(target, smash_config, {}, readme)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        return {"format": self.name, **summary}


__all__ = ["HFCheckpointFormat", "quantizer_options"]
