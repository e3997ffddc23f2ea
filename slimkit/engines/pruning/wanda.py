"""Wanda (Sun et al., 2023): prune by weight magnitude times input activation norm, per output row, no update.

A weight ``W_ij`` scores ``|W_ij| * ||X_j||_2``, the L2 norm of input channel ``j`` over every calibration token.
Each output row loses its lowest-scored ``sparsity`` share (unstructured) or the ``N`` lowest of each group of
``M`` consecutive columns (N:M: ``N`` zeros per ``M``); the kept weights are not changed. Only the per-channel
sums of squared inputs are collected (:class:`InputNorms`, ``in`` floats per layer, not an ``[in, in]`` Hessian).
With every norm equal the score is the magnitude, so :func:`wanda_mask` with ``norms=None`` is per-row magnitude
pruning (the baseline both papers compare with).

:func:`prune_model_wanda` runs block by block on a transformer like SparseGPT, each block's inputs coming from the
already pruned blocks before it.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from slimkit.engines.pruning.sparsegpt import Specs, check_pattern, nm_mask, run_pruner
from slimkit.engines.quantization.lowbit.layers import weight_of
from slimkit.engines.quantization.lowbit.quantize import LayerStatsCollector


class InputNorms:
    """Running per-input-channel sum of squares over every input row a layer sees."""

    def __init__(self, in_features: int, device: torch.device | str = "cpu") -> None:
        self.squares = torch.zeros(in_features, dtype=torch.float32, device=device)

    def add(self, x: torch.Tensor) -> None:
        """Add a batch of inputs ``[..., in_features]``."""
        rows = x.detach().reshape(-1, x.shape[-1]).float()
        self.squares.add_(rows.square().sum(dim=0))

    def norms(self) -> torch.Tensor:
        """``||X_j||_2`` per input channel."""
        return self.squares.sqrt()


def wanda_mask(w: torch.Tensor, norms: torch.Tensor | None = None, sparsity: float = 0.5, prune_n: int = 0,
               prune_m: int = 0) -> torch.Tensor:
    """True where Wanda removes a weight of ``w [out, in]`` (``norms [in]``; None: per-row magnitude pruning)."""
    out_f, in_f = w.shape
    check_pattern(sparsity, prune_n, prune_m, in_f)
    score = w.detach().float().abs()
    if norms is not None:
        score = score * norms.to(score.device).float().unsqueeze(0)
    if prune_n:
        return nm_mask(score, prune_n, prune_m)
    mask = torch.zeros(out_f, in_f, dtype=torch.bool, device=w.device)
    k = int(in_f * sparsity)
    if k:
        mask.scatter_(1, score.topk(k, dim=1, largest=False).indices, True)
    return mask


class _Wanda(LayerStatsCollector):
    """The block-wise worker: input norms per input tensor, each layer masked in place."""

    def __init__(self, sparsity: float, prune_n: int, prune_m: int) -> None:
        super().__init__(0, -1, False)
        self.sparsity, self.prune_n, self.prune_m = sparsity, prune_n, prune_m
        self.stats: dict[str, InputNorms] = {}

    def observe(self, name: str, x: torch.Tensor) -> None:  # noqa: D102
        self._add(self.stats, name, x, InputNorms)

    def quantize_block(self, model, block_name, block, names, shared, producers, probe=None) -> None:  # noqa: D102
        self._last = None
        for n in names:
            target = weight_of(model.get_submodule(n))
            mask = wanda_mask(target, self.stats[n].norms(), self.sparsity, self.prune_n, self.prune_m)
            target.masked_fill_(mask, 0.0)
            self.specs[n] = {"sparsity": float((target == 0).float().mean())}
        self.stats.clear()


def prune_model_wanda(model: nn.Module, calibration_ids: torch.Tensor, sparsity: float = 0.5, prune_n: int = 0,
                      prune_m: int = 0, exclude: Iterable[str] = ("lm_head",),
                      batch_size: int = 1) -> tuple[Specs, list[str]]:
    """Wanda every selected Linear/Conv1D layer inside the transformer blocks, block by block, in place.

    Returns ``({layer: {"sparsity": share of exact zeros}}, outside)`` like
    :func:`~slimkit.engines.pruning.sparsegpt.prune_model_sparsegpt`.
    """
    return run_pruner(model, calibration_ids, wanda_worker(sparsity, prune_n, prune_m), exclude, batch_size, "wanda")


def wanda_worker(sparsity: float = 0.5, prune_n: int = 0, prune_m: int = 0) -> LayerStatsCollector:
    """The block-wise Wanda worker (for :func:`run_pruner` or a streaming ``PruningStep``)."""
    check_pattern(sparsity, prune_n, prune_m)
    return _Wanda(sparsity, prune_n, prune_m)
