"""Checkpoint names -> model names: the renames and expert merges transformers applies when it loads a folder.

Mixture-of-experts checkpoints store one matrix per expert (``mlp.experts.3.gate_proj.weight``), while
transformers' modules hold the experts fused (``mlp.experts.gate_up_proj`` ``[experts, 2 * ffn, hidden]``).
transformers declares each architecture's conversion (:func:`transformers.conversion_mapping
.extract_weight_conversions_for_model`); :func:`stored_layout` reads that declaration as data and says, for every
model tensor, which stored tensors make it, so a streamed block reads its experts from the shards one by one into
the fused tensor (:meth:`Merged.assemble`) and never loads more than that block. Renames and the MoE merge (stack
the experts, then concatenate the gate and up projections) are supported; any other conversion is refused by name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from slimkit.errors import ModelNotSupportedError

__all__ = ["Merged", "stored_layout"]


@dataclass(frozen=True)
class Merged:
    """A model tensor made of stored ones: ``parts[i][e]`` is source pattern ``i``'s tensor for expert ``e``.

    The experts are stacked (dim 0) and, with several source patterns, the stacks concatenated along dim 1.
    """

    parts: tuple[tuple[str, ...], ...]

    def names(self) -> list[str]:
        """Every stored tensor this one reads."""
        return [n for part in self.parts for n in part]

    def assemble(self, read: Callable[[str], torch.Tensor], shape: Callable[[str], tuple[int, ...]]) -> torch.Tensor:
        """The fused tensor, filled one stored tensor at a time (``read(name)``; ``shape(name)`` from the header).

        Only the output and one expert's matrix are alive at once: no second copy of the experts.
        """
        rows = [shape(part[0])[0] for part in self.parts]
        out = None
        start = 0
        for part, height in zip(self.parts, rows, strict=True):
            for e, name in enumerate(part):
                tensor = read(name)
                if tuple(tensor.shape) != tuple(shape(part[0])):
                    raise ModelNotSupportedError(f"Stored expert tensor {name} has shape {tuple(tensor.shape)}, "
                                                 f"unlike {part[0]} {tuple(shape(part[0]))}: the experts cannot be "
                                                 "stacked.")
                if out is None:
                    out = torch.empty((len(part), sum(rows), *tensor.shape[1:]), dtype=tensor.dtype,
                                      device=tensor.device)
                out[e, start : start + height] = tensor
            start += height
        assert out is not None
        return out


def _conversions(model: nn.Module) -> list[Any]:
    try:
        from transformers.conversion_mapping import extract_weight_conversions_for_model
    except ImportError:  # an older transformers: checkpoints are stored as the modules hold them
        return []
    return list(extract_weight_conversions_for_model(model) or [])


def _pattern(source: str) -> re.Pattern[str]:
    """A source pattern (``.experts.*.w1.weight``) as a regex whose one group is the expert index."""
    return re.compile(re.escape(source).replace(r"\*", r"(\d+)"))


def stored_layout(model: nn.Module, wanted: list[str], stored: set[str]) -> tuple[dict[str, str], dict[str, Merged]]:
    """For the model tensors ``wanted`` absent from ``stored``: ``(renamed, merged)``.

    ``renamed`` maps a model name to the one stored tensor it is (after the architecture's renames); ``merged`` maps
    a model name to the experts it is stacked from. Names found in neither are left for the caller to report.
    """
    absent = [n for n in wanted if n not in stored]
    if not absent:
        return {}, {}
    transforms = _conversions(model)
    renames = [t for t in transforms if not hasattr(t, "operations")]
    converters = [t for t in transforms if hasattr(t, "operations")]

    def rename(name: str) -> str:
        for t in renames:
            for source, target in zip(t.source_patterns, t.target_patterns, strict=False):
                name = re.sub(source, target, name)
        return name

    as_model = {rename(s): s for s in stored}
    renamed = {n: as_model[n] for n in absent if n in as_model}
    groups: dict[str, dict[int, dict[int, str]]] = {}
    rules: dict[str, Any] = {}
    for t in converters:
        patterns = [_pattern(s) for s in t.source_patterns]
        target = t.target_patterns[0]
        for name, original in as_model.items():
            for i, pattern in enumerate(patterns):
                match = pattern.search(name)
                if match is not None:
                    key = name[: match.start()] + target + name[match.end():]
                    groups.setdefault(key, {}).setdefault(i, {})[int(match.group(1))] = original
                    rules[key] = t
    merged: dict[str, Merged] = {}
    for n in absent:
        if n in renamed or n not in groups:
            continue
        t, found = rules[n], groups[n]
        ops = [f"{type(op).__name__}(dim={getattr(op, 'dim', '?')})" for op in getattr(t, "operations", [])]
        if ops not in (["MergeModulelist(dim=0)"], ["MergeModulelist(dim=0)", "Concatenate(dim=1)"]):
            raise ModelNotSupportedError(
                f"{type(model).__name__} builds {n} from its stored tensors with {', '.join(ops)}, which streaming "
                "does not replay (it stacks experts and concatenates their projections). Smash it in memory "
                "(--no-stream).")
        count = len(t.source_patterns)
        experts = sorted(found.get(0, {}))
        if sorted(found) != list(range(count)) or experts != list(range(len(experts))) or any(
                sorted(found[i]) != experts for i in range(count)):
            raise ModelNotSupportedError(
                f"The stored experts of {n} are incomplete: expected experts 0..{len(experts) - 1} for each of "
                f"{', '.join(t.source_patterns)}. The folder is missing shards or belongs to another model.")
        merged[n] = Merged(tuple(tuple(found[i][e] for e in experts) for i in range(count)))
    return renamed, merged
