"""Attention-head pruning for Hugging Face style blocks (Llama-like q/k/v/o_proj, BERT-like query/key/value).

The unit of pruning is a key/value group: one key/value head plus the ``num_heads / num_kv_heads`` query
heads that read it (with plain multi-head attention a group is a single head). Pruning a group masks its
rows of the q, k and v projections (and their biases) and its columns of the output projection, so grouped
query attention stays consistent. At sparsity ``s`` a block loses ``floor(s * num_kv_heads + 1e-6)`` groups
(at least one group stays); groups with the smallest weight norm go first, ties to the lower index.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from slimkit.engines.pruning.compressor import Pruner
from slimkit.engines.pruning.config import PruningConfigError, resolve_config_list
from slimkit.engines.pruning.maskers import MaskDict, WeightMasker, lowest_indices, num_to_prune
from slimkit.engines.pruning.wrapper import PrunerModuleWrapper


@dataclass(frozen=True)
class HeadLayout:
    """Where a block's projections live (relative names) and how its heads are laid out."""

    q: str
    k: str
    v: str
    o: str
    num_heads: int
    num_kv_heads: int
    head_dim: int

    @property
    def group_size(self) -> int:
        """Query heads per key/value head."""
        return self.num_heads // self.num_kv_heads


def _linear(module: nn.Module, name: str) -> nn.Linear | None:
    try:
        sub = module.get_submodule(name)
    except AttributeError:
        return None
    return sub if isinstance(sub, nn.Linear) else None


def find_head_layout(block: nn.Module) -> HeadLayout | None:
    """Recognise an attention block, or return ``None`` when it is not one this pruner understands."""
    names = None
    head_dim = None
    if all(_linear(block, n) is not None for n in ("q_proj", "k_proj", "v_proj", "o_proj")):
        names = ("q_proj", "k_proj", "v_proj", "o_proj")
        head_dim = getattr(block, "head_dim", None)
        config = getattr(block, "config", None)
        if head_dim is None and config is not None:
            head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    else:
        for inner in ("self", "attention"):
            if all(_linear(block, f"{inner}.{n}") is not None for n in ("query", "key", "value")) and (
                _linear(block, "output.dense") is not None
            ):
                names = (f"{inner}.query", f"{inner}.key", f"{inner}.value", "output.dense")
                head_dim = getattr(block.get_submodule(inner), "attention_head_size", None)
                break
    if names is None or not isinstance(head_dim, int) or head_dim < 1:
        return None
    q, k, v, o = (_linear(block, n) for n in names)
    heads, rest = divmod(q.out_features, head_dim)
    kv_heads, kv_rest = divmod(k.out_features, head_dim)
    if rest or kv_rest or kv_heads == 0 or heads % kv_heads or v.out_features != k.out_features:
        return None
    if o.in_features != q.out_features:
        return None
    return HeadLayout(*names, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim)


class AttentionHeadMasker(WeightMasker):
    """Score key/value groups by the L1 or L2 norm of all their q/k/v rows and o columns; mask whole groups."""

    def __init__(self, model: nn.Module, pruner: AttentionHeadPruner, importance: str = "l1") -> None:
        super().__init__(model, pruner)
        self.importance = importance

    def group_importance(self, block: str) -> torch.Tensor:
        """One score per key/value group of ``block`` (masked weights count as zero)."""
        layout = self.pruner.blocks[block]
        w = {role: self.pruner.wrapper_for(block, role) for role in "qkvo"}
        hd, g = layout.head_dim, layout.group_size

        def masked(role: str) -> torch.Tensor:
            return (w[role].module.weight.detach() * w[role].weight_mask).float()

        power = 1 if self.importance == "l1" else 2
        q = masked("q").abs().pow(power).reshape(layout.num_kv_heads, g * hd, -1).sum(dim=(1, 2))
        k = masked("k").abs().pow(power).reshape(layout.num_kv_heads, hd, -1).sum(dim=(1, 2))
        v = masked("v").abs().pow(power).reshape(layout.num_kv_heads, hd, -1).sum(dim=(1, 2))
        o = masked("o").abs().pow(power).reshape(-1, layout.num_kv_heads, g * hd).sum(dim=(0, 2))
        total = q + k + v + o
        return total if power == 1 else total.sqrt()

    def group_keep(self, sparsity: float, block: str) -> torch.Tensor:
        """``[num_kv_heads]`` 0/1 tensor: which key/value groups of ``block`` stay."""
        layout = self.pruner.blocks[block]
        importance = self.group_importance(block)
        keep = torch.ones(layout.num_kv_heads, device=importance.device)
        keep[lowest_indices(importance, num_to_prune(sparsity, layout.num_kv_heads))] = 0
        return keep

    def calc_mask(self, sparsity: float, wrapper: PrunerModuleWrapper, wrapper_idx: int | None = None) -> MaskDict:
        """Masks of one projection, derived from its block's group decision."""
        block, role = self.pruner.projection_of[wrapper.name]
        layout = self.pruner.blocks[block]
        keep_kv = self.group_keep(sparsity, block)
        keep_q = keep_kv.repeat_interleave(layout.group_size)
        per_head = keep_kv if role in "kv" else keep_q
        keep_units = per_head.repeat_interleave(layout.head_dim)
        weight_mask = torch.ones_like(wrapper.weight_mask)
        units = keep_units.to(weight_mask)
        if role == "o":
            weight_mask = weight_mask * units.reshape(1, -1)
            bias_mask = None if wrapper.bias_mask is None else torch.ones_like(wrapper.bias_mask)
        else:
            weight_mask = weight_mask * units.reshape(-1, 1)
            bias_mask = None if wrapper.bias_mask is None else units.to(wrapper.bias_mask.dtype).clone()
        return {"weight_mask": weight_mask, "bias_mask": bias_mask}


class AttentionHeadPruner(Pruner):
    """Prune whole attention heads (key/value groups under GQA) of Llama-like and BERT-like blocks.

    ``config_list`` selects attention *blocks* (e.g. ``op_types: ["LlamaAttention"]`` or ``op_names:
    ["layers.0.self_attn"]``; ``"default"`` = every recognised attention block type in the model) and
    ``sparsity`` is the fraction of key/value groups to prune per block. The wrapped layers, and the names in
    :meth:`get_masks`, are the blocks' q/k/v/o projections. ``importance`` is ``"l1"`` or ``"l2"``.
    """

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        importance: str = "l1",
        optimizer: torch.optim.Optimizer | None = None,
        dummy_input: Any = None,
    ) -> None:
        if importance not in ("l1", "l2"):
            raise PruningConfigError(f"AttentionHeadPruner importance must be 'l1' or 'l2', got {importance!r}.")
        self.blocks: dict[str, HeadLayout] = {}
        self.projection_of: dict[str, tuple[str, str]] = {}
        super().__init__(model, config_list, optimizer, dummy_input)
        self._by_name = {w.name: w for w in self.modules_wrapper}
        self.masker = AttentionHeadMasker(model, self, importance)

    def _select_layers(self) -> list[tuple[str, nn.Module, dict[str, Any]]]:
        layouts = {type(m).__name__ for _, m in self.bound_model.named_modules() if find_head_layout(m) is not None}
        if not layouts:
            raise PruningConfigError(
                "AttentionHeadPruner found no attention block in this model; it understands blocks with "
                "q_proj/k_proj/v_proj/o_proj Linear layers and a head_dim (Llama, Mistral, Qwen2, ...) and "
                "BERT-style blocks with self.query/key/value and output.dense."
            )
        types = tuple(sorted(layouts))
        resolved = resolve_config_list(self.bound_model, self.config_list, types, types, self.extra_config_keys)
        layers = []
        for block_name, config in resolved.items():
            layout = find_head_layout(self.bound_model.get_submodule(block_name))
            if layout is None:
                raise PruningConfigError(f"Block {block_name!r} does not have a recognisable head layout.")
            self.blocks[block_name] = layout
            for role, rel in zip("qkvo", (layout.q, layout.k, layout.v, layout.o), strict=True):
                name = f"{block_name}.{rel}"
                self.projection_of[name] = (block_name, role)
                layers.append((name, self.bound_model.get_submodule(name), config))
        return layers

    def wrapper_for(self, block: str, role: str) -> PrunerModuleWrapper:
        """The wrapper of ``block``'s projection ``role`` (one of ``q``, ``k``, ``v``, ``o``)."""
        layout = self.blocks[block]
        return self._by_name[f"{block}.{getattr(layout, role)}"]

    @torch.no_grad()
    def update_mask(self) -> None:
        """Decide all blocks from the current weights first, then store (scores never see half-updated masks)."""
        pending = [(i, w) for i, w in enumerate(self.modules_wrapper) if not w.if_calculated]
        decided = [(w, self.masker.calc_mask(w.config["sparsity"], w, i)) for i, w in pending]
        for wrapper, masks in decided:
            self._store_masks(wrapper, masks)
            wrapper.if_calculated = True

    def get_pruned_heads(self) -> dict[str, list[int]]:
        """``{block: sorted pruned query-head indices}`` (e.g. for Hugging Face ``prune_heads``)."""
        return self._pruned("q", "num_heads")

    def get_pruned_kv_heads(self) -> dict[str, list[int]]:
        """``{block: sorted pruned key/value-head indices}``."""
        return self._pruned("k", "num_kv_heads")

    def _pruned(self, role: str, count: str) -> dict[str, list[int]]:
        result = {}
        for block, layout in self.blocks.items():
            rows = self.wrapper_for(block, role).weight_mask.reshape(getattr(layout, count), -1)
            result[block] = [h for h in range(getattr(layout, count)) if not bool(rows[h].any())]
        return result
