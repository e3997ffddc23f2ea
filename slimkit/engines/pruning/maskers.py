"""Weight maskers: the algorithms that turn a layer and a sparsity into masks.

Counting rule (every masker): at sparsity ``s`` over ``N`` units (elements, filters, channels or head groups)
exactly ``floor(s * N + 1e-6)`` units are pruned, capped at ``N - 1`` so a layer always keeps one unit. The
units with the lowest importance go first; ties go to the lower index (stable sort), so masks are
deterministic. Units already masked count as least important, which keeps iterative masks monotonic.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.wrapper import PrunerModuleWrapper
from slimkit.engines.speedup.layers import out_dim, out_major
from slimkit.errors import check_int

MaskDict = dict[str, "torch.Tensor | None"]


def num_to_prune(sparsity: float, total: int) -> int:
    """Units to prune: ``floor(sparsity * total + 1e-6)``, never ``total`` itself (one unit always stays)."""
    if total <= 1:
        return 0
    return max(0, min(int(math.floor(sparsity * total + 1e-6)), total - 1))


def check_round_to(value: Any, who: str = "round_to") -> int:
    """``value`` as a channel-count multiple (an int >= 1), else a clear error."""
    return check_int(who, value, meaning="kept channel counts are rounded to a multiple of it; 1 keeps them as the "
                     "sparsity gives them, 16 suits oneDNN's CPU conv blocks", error=PruningConfigError)


def round_kept(kept: int, total: int, round_to: int) -> int:
    """``kept`` of ``total`` channels moved to the nearest multiple of ``round_to`` within ``[round_to, total]``.

    The nearest multiple (not always up, as Torch-Pruning's ``round_to``) keeps the overall MACs close to the
    target; a tie keeps the larger count. When the nearest multiple is above ``total`` the next one down is used,
    and a width below ``round_to`` keeps everything. ``round_to=1`` or ``kept == total`` change nothing.
    """
    if round_to == 1 or kept >= total:
        return kept
    low = kept // round_to * round_to
    options = [m for m in (low, low + round_to) if round_to <= m <= total]
    return min(options, key=lambda m: (abs(m - kept), -m)) if options else total


def rounded_num_to_prune(sparsity: float, total: int, round_to: int = 1) -> int:
    """:func:`num_to_prune` with the kept count ``total - pruned`` rounded by :func:`round_kept`."""
    return total - round_kept(total - num_to_prune(sparsity, total), total, round_to)


def lowest_indices(importance: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the ``k`` least important entries of a 1-D tensor (ties: lower index first)."""
    return torch.argsort(importance, stable=True)[:k]


def _channel_view(tensor: torch.Tensor, module: nn.Module | None = None) -> torch.Tensor:
    """``[out_channels, -1]`` view of a weight-shaped tensor (``Conv1D`` stores its weight transposed)."""
    tensor = tensor.detach().float()
    if module is not None:
        tensor = out_major(module, tensor)
    return tensor.reshape(tensor.shape[0], -1)


class WeightMasker:
    """Base class: ``calc_mask(sparsity, wrapper, wrapper_idx)`` returns ``{"weight_mask", "bias_mask"}``.

    ``pruner`` is the owning :class:`~slimkit.engines.pruning.Pruner`, kept as a plain reference for maskers
    that need its state (this module does not import the pruner: the pruner imports its maskers).
    """

    def __init__(self, model: nn.Module, pruner: Any, **kwargs: Any) -> None:
        self.model = model
        self.pruner = pruner

    def calc_mask(self, sparsity: float, wrapper: PrunerModuleWrapper, wrapper_idx: int | None = None) -> MaskDict:
        """Compute the masks of ``wrapper``'s layer at ``sparsity``."""
        raise NotImplementedError(f"{type(self).__name__} must implement calc_mask(sparsity, wrapper, wrapper_idx).")


class LevelPrunerMasker(WeightMasker):
    """Unstructured pruning: zero the smallest ``|w|`` elements of the weight; the bias is kept.

    With the pruner's ``method`` set to ``"random"`` a seeded random subset goes instead (a baseline).
    """

    def calc_mask(self, sparsity: float, wrapper: PrunerModuleWrapper, wrapper_idx: int | None = None) -> MaskDict:
        """Mask the ``num_to_prune(s, numel)`` smallest-magnitude (or randomly chosen) weights."""
        weight = wrapper.module.weight.detach()
        if getattr(self.pruner, "method", "l1") == "random":  # seeded per layer: the same masks on every run
            seed = int(getattr(self.pruner, "seed", 0)) * 100003 + (wrapper_idx or 0)
            importance = torch.rand(weight.numel(), generator=torch.Generator().manual_seed(seed)).to(weight.device)
        else:
            importance = weight.float().abs().flatten()
        importance = importance.masked_fill(wrapper.weight_mask.flatten() == 0, -math.inf)
        mask = torch.ones_like(importance)
        mask[lowest_indices(importance, num_to_prune(sparsity, importance.numel()))] = 0
        weight_mask = mask.reshape(weight.shape).to(wrapper.weight_mask.dtype)
        bias_mask = None if wrapper.bias_mask is None else wrapper.bias_mask.clone()
        return {"weight_mask": weight_mask, "bias_mask": bias_mask}


class StructuredWeightMasker(WeightMasker):
    """Filter (output-channel) pruning along dim 0 of the weight; the bias is masked along with it.

    Subclasses implement :meth:`get_channel_importance`; the base handles counting and mask layout.
    """

    def get_channel_importance(self, wrapper: PrunerModuleWrapper, wrapper_idx: int | None) -> torch.Tensor:
        """Return one importance value per output channel (higher = keep)."""
        raise NotImplementedError

    def calc_mask(self, sparsity: float, wrapper: PrunerModuleWrapper, wrapper_idx: int | None = None) -> MaskDict:
        """Zero the filters with the lowest importance, ``num_to_prune(s, out_channels)`` of them."""
        importance = self.get_channel_importance(wrapper, wrapper_idx).detach().float().flatten()
        channels = wrapper.weight_mask.shape[out_dim(wrapper.module)]
        if importance.numel() != channels:
            raise RuntimeError(
                f"{type(self).__name__} returned {importance.numel()} importances for {channels} channels "
                f"of layer {wrapper.name!r}."
            )
        already = _channel_view(wrapper.weight_mask, wrapper.module).sum(dim=1) == 0
        importance = importance.masked_fill(already, -math.inf)
        keep = torch.ones(channels, device=importance.device)
        keep[lowest_indices(importance, num_to_prune(sparsity, channels))] = 0
        return channel_masks(wrapper, keep)


def _masked_filters(wrapper: PrunerModuleWrapper) -> torch.Tensor:
    """``[out_channels, -1]`` masked weights of the wrapped layer."""
    return _channel_view(wrapper.module.weight, wrapper.module) * _channel_view(wrapper.weight_mask, wrapper.module)


def channel_masks(wrapper: PrunerModuleWrapper, keep: torch.Tensor) -> MaskDict:
    """Masks for ``wrapper`` keeping the output channels where ``keep`` (shape ``[C]``) is 1."""
    weight_mask = wrapper.weight_mask
    shape = [1] * weight_mask.dim()
    shape[out_dim(wrapper.module)] = -1
    keep = keep.to(device=weight_mask.device, dtype=weight_mask.dtype)
    new_weight = torch.ones_like(weight_mask) * keep.reshape(shape)
    new_bias = None
    if wrapper.bias_mask is not None:
        new_bias = torch.ones_like(wrapper.bias_mask) * keep.to(wrapper.bias_mask.dtype)
    return {"weight_mask": new_weight, "bias_mask": new_bias}


class L1FilterPrunerMasker(StructuredWeightMasker):
    """Filter importance = L1 norm of the filter's weights (Li et al., 2017)."""

    def get_channel_importance(self, wrapper: PrunerModuleWrapper, wrapper_idx: int | None) -> torch.Tensor:
        """Sum of ``|w|`` per filter."""
        return (_masked_filters(wrapper)).abs().sum(dim=1)


class L2FilterPrunerMasker(StructuredWeightMasker):
    """Filter importance = L2 norm of the filter's weights."""

    def get_channel_importance(self, wrapper: PrunerModuleWrapper, wrapper_idx: int | None) -> torch.Tensor:
        """Euclidean norm per filter."""
        return (_masked_filters(wrapper)).norm(dim=1)


class FPGMPrunerMasker(StructuredWeightMasker):
    """Filter Pruning via Geometric Median (He et al., 2019).

    Filters closest to the geometric median of the layer's filters are the most replaceable. A filter's
    importance is its summed Euclidean distance to all other filters; the smallest sums are pruned.
    """

    def get_channel_importance(self, wrapper: PrunerModuleWrapper, wrapper_idx: int | None) -> torch.Tensor:
        """Sum of distances from each filter to every other filter."""
        filters = _masked_filters(wrapper)
        return torch.cdist(filters.unsqueeze(0), filters.unsqueeze(0)).squeeze(0).sum(dim=1)


class SlimPrunerMasker(WeightMasker):
    """Network Slimming (Liu et al., 2017): prune BatchNorm channels with the smallest ``|gamma|``.

    ``calc_mask`` works per layer; :meth:`calc_global_masks` ranks channels across all given BN layers with
    one budget ``num_to_prune(s, total_channels)`` while reserving each layer's largest ``|gamma|``.
    """

    @staticmethod
    def _gamma(wrapper: PrunerModuleWrapper) -> torch.Tensor:
        gamma = wrapper.module.weight.detach().float().abs() * wrapper.weight_mask.float()
        return gamma.masked_fill(wrapper.weight_mask == 0, -math.inf)

    def calc_mask(self, sparsity: float, wrapper: PrunerModuleWrapper, wrapper_idx: int | None = None) -> MaskDict:
        """Per-layer variant: prune this BN layer's lowest ``|gamma|`` channels."""
        gamma = self._gamma(wrapper)
        keep = torch.ones(gamma.numel(), device=gamma.device)
        keep[lowest_indices(gamma, num_to_prune(sparsity, gamma.numel()))] = 0
        return channel_masks(wrapper, keep)

    def calc_global_masks(self, sparsity: float, wrappers: list[PrunerModuleWrapper]) -> list[MaskDict]:
        """Global variant: one ranking over every channel of ``wrappers``, each layer keeping >= 1 channel."""
        gammas = [self._gamma(w) for w in wrappers]
        sizes = [g.numel() for g in gammas]
        candidates = []
        for g in gammas:
            g = g.clone()
            g[torch.argmax(g)] = math.inf  # reserved: every layer keeps its strongest channel
            candidates.append(g)
        flat = torch.cat(candidates)
        total = flat.numel()
        budget = min(num_to_prune(sparsity, total), total - len(wrappers))
        keep = torch.ones(total, device=flat.device)
        keep[lowest_indices(flat, budget)] = 0
        return [channel_masks(w, k) for w, k in zip(wrappers, keep.split(sizes), strict=True)]
