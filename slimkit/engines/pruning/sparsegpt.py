"""SparseGPT (Frantar & Alistarh, 2023): one-shot pruning of a layer by an OBS column sweep on its input Hessian.

For a layer ``W [out, in]`` with calibration inputs ``X`` the Hessian of ``||W X - W' X||^2`` is ``H = 2 X X^T``
(the same for every output row). With ``U`` the upper Cholesky factor of ``H^-1`` (GPTQ's, from
:func:`~slimkit.engines.quantization.lowbit.gptq.inverse_hessian_factor`), the columns are swept left to right
in blocks of ``block_size``. At the start of each block (or of each group of ``M`` columns for N:M) the weights to
remove are chosen by the OBS score ``w^2 / U_jj^2``: the smallest ``sparsity`` share of the block (unstructured) or
the ``N`` smallest of each row's group of ``M`` columns (N:M: ``N`` zeros per ``M``, so 2:4 and 4:8 keep half).
Each column's error (the removed weight, or with ``bits`` the kept weight's rounding error too) divided by
``U_ii`` is spread onto the later columns along row ``i`` of ``U``: immediately inside the block, to the rest of
the matrix once per block (one matmul). With ``bits`` the kept weights are quantized in the same sweep on GPTQ's
grid (per group of ``group_size`` columns, parameters fixed when the sweep reaches the group) and a removed
weight gets the group's zero code, so it dequantizes to exactly 0 ("sparse + 4-bit").

:func:`prune_model_sparsegpt` runs it block by block on a transformer (:func:`run_blockwise`), each block's inputs
coming from the already pruned blocks before it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from slimkit.engines.quantization.lowbit.blockwise import BlockStep
from slimkit.engines.quantization.lowbit.calibration import InputStore, process_block, run_blockwise
from slimkit.engines.quantization.lowbit.gptq import inverse_hessian_factor
from slimkit.engines.quantization.lowbit.layers import pack_layer, replace_module, require_targets, weight_of
from slimkit.engines.quantization.lowbit.linear import n_groups, row_groups
from slimkit.engines.quantization.lowbit.packing import check_bits
from slimkit.engines.quantization.lowbit.quantize import HessianCollector, LayerStatsCollector
from slimkit.engines.quantization.lowbit.rtn import row_slices, search_params
from slimkit.errors import ConfigError

Specs = dict[str, dict]


@dataclass
class SparseResult:
    """One layer's SparseGPT result: the pruned (float) weight, or with ``bits`` the codes of the packed layer."""

    #: ``[out, in]`` True where a weight was removed
    mask: torch.Tensor
    #: the pruned weight (float32) when not quantizing, else None
    weight: torch.Tensor | None = None
    codes: torch.Tensor | None = None
    scales: torch.Tensor | None = None
    zeros: torch.Tensor | None = None


def check_pattern(sparsity: float, prune_n: int, prune_m: int, in_features: int | None = None,
                  block_size: int | None = None) -> None:
    """Refuse a sparsity outside [0, 1) or an N:M pattern the widths cannot hold (a ConfigError saying why)."""
    if prune_n or prune_m:
        if not 0 < prune_n < prune_m:
            raise ConfigError(f"N:M pruning needs 0 < N < M (N weights removed of every M); got {prune_n}:{prune_m}.")
        if in_features is not None and in_features % prune_m:
            raise ConfigError(f"N:M pruning {prune_n}:{prune_m} needs input widths divisible by {prune_m}; a layer "
                              f"has {in_features} inputs. Exclude it or use unstructured sparsity.")
        if block_size is not None and block_size % prune_m:
            raise ConfigError(f"block_size={block_size} must be a multiple of M={prune_m} for N:M pruning.")
    elif not 0.0 <= sparsity < 1.0:
        raise ConfigError(f"sparsity must be in [0, 1); got {sparsity}.")


def nm_mask(score: torch.Tensor, prune_n: int, prune_m: int) -> torch.Tensor:
    """True at the ``prune_n`` lowest scores of each row's consecutive groups of ``prune_m`` columns."""
    out_f, width = score.shape
    groups = score.reshape(out_f, width // prune_m, prune_m)
    mask = torch.zeros_like(groups, dtype=torch.bool)
    mask.scatter_(2, groups.topk(prune_n, dim=2, largest=False).indices, True)
    return mask.reshape(out_f, width)


def lowest_mask(score: torch.Tensor, sparsity: float) -> torch.Tensor:
    """True at the ``int(sparsity * numel)`` lowest entries of ``score`` (ties broken by position)."""
    k = int(score.numel() * sparsity)
    mask = torch.zeros(score.numel(), dtype=torch.bool, device=score.device)
    if k:
        mask[score.reshape(-1).topk(k, largest=False).indices] = True
    return mask.view_as(score)


@torch.no_grad()
def sparsegpt_prune(w: torch.Tensor, hinv: torch.Tensor, sparsity: float = 0.5, prune_n: int = 0, prune_m: int = 0,
                    block_size: int = 128, bits: int = 0, group_size: int = 128, sym: bool = False,
                    importance: torch.Tensor | None = None, clip_search: bool = True,
                    spread: bool = True) -> SparseResult:
    """Prune ``w [out, in]`` with ``hinv``, the upper Cholesky factor of the damped inverse Hessian (module doc).

    ``prune_n``/``prune_m`` > 0 select N:M (``prune_n`` zeros in every ``prune_m`` columns of a row), else
    ``sparsity`` is the share removed from each block of columns. With ``bits`` (2, 3, 4, 8) the kept weights are
    quantized in the sweep (``importance``: the Hessian diagonal weighting the clipping search). ``spread=False``
    chooses the same masks without spreading any error (the OBS score on the original weights; for tests and
    ablations).
    """
    out_f, in_f = w.shape
    check_pattern(sparsity, prune_n, prune_m, in_f, block_size)
    if tuple(hinv.shape) != (in_f, in_f):
        raise ConfigError(f"SparseGPT: inverse Hessian shape {tuple(hinv.shape)} does not match a weight with {in_f} "
                          "input features.")
    weight = w.detach().float().clone()
    mask = torch.zeros(out_f, in_f, dtype=torch.bool, device=w.device)
    quant = _Grid(out_f, in_f, bits, group_size, sym, importance, clip_search, w.device) if bits else None
    for start in range(0, in_f, block_size):
        end = min(start + block_size, in_f)
        block = weight[:, start:end].clone()
        errors = torch.zeros_like(block)
        ublock = hinv[start:end, start:end]
        diag = torch.diagonal(ublock)
        bmask = mask[:, start:end]
        if not prune_n:
            bmask.copy_(lowest_mask(block.square() / diag.square(), sparsity))
        for i in range(end - start):
            if prune_n and i % prune_m == 0:
                bmask[:, i : i + prune_m] = nm_mask(block[:, i : i + prune_m].square()
                                                    / diag[i : i + prune_m].square(), prune_n, prune_m)
            column = block[:, i]
            removed = bmask[:, i]
            kept = column.masked_fill(removed, 0.0)
            if quant is not None:
                if (start + i) % quant.group_size == 0:  # a group starts: its range from its current kept weights
                    quant.fit_group(start + i, block[:, i:].masked_fill(bmask[:, i:], 0.0), weight[:, end:])
                kept = quant.column(start + i, kept, removed)
            err = (column - kept).div_(diag[i])
            if spread:
                block[:, i + 1 :].addr_(err, ublock[i, i + 1 :], alpha=-1.0)
            block[:, i] = kept
            errors[:, i] = err
        weight[:, start:end] = block
        if spread:
            for cols in row_slices(in_f - end, out_f):  # the lazy update in column slices: bounded temporaries
                lo, hi = end + cols.start, end + cols.stop
                weight[:, lo:hi].sub_(errors @ hinv[start:end, lo:hi])
    if quant is None:
        return SparseResult(mask, weight=weight.masked_fill_(mask, 0.0))
    return SparseResult(mask, codes=quant.codes, scales=quant.scales, zeros=quant.zeros)


class _Grid:
    """GPTQ's grid inside the sweep: group parameters fixed when the sweep reaches a group, codes column by column."""

    def __init__(self, out_f: int, in_f: int, bits: int, group_size: int, sym: bool, importance: torch.Tensor | None,
                 clip_search: bool, device: torch.device) -> None:
        check_bits(bits)
        self.bits, self.sym, self.maxq = bits, sym, float((1 << bits) - 1)
        self.group_size = row_groups(group_size, in_f)
        self.grid = 10 if clip_search else 1
        self.importance = importance
        groups = n_groups(in_f, self.group_size)
        self.scales = torch.zeros(out_f, groups, device=device)
        self.zeros = torch.zeros(out_f, groups, device=device)
        self.codes = torch.zeros(out_f, in_f, dtype=torch.uint8, device=device)

    def fit_group(self, col: int, block_rest: torch.Tensor, after: torch.Tensor) -> None:
        """Fix the parameters of the group starting at ``col`` from its columns' current weights."""
        width = min(self.group_size, self.codes.shape[1] - col)
        rest = torch.cat([block_rest[:, :width], after[:, : max(0, width - block_rest.shape[1])]], dim=1)
        imp = None if self.importance is None else self.importance[col : col + width]
        g = col // self.group_size
        self.scales[:, g], self.zeros[:, g] = search_params(rest, self.bits, self.sym, importance=imp, grid=self.grid)

    def column(self, col: int, kept: torch.Tensor, removed: torch.Tensor) -> torch.Tensor:
        """Codes of column ``col`` (removed weights: the zero code); returns its dequantized values."""
        g = col // self.group_size
        s, z = self.scales[:, g], self.zeros[:, g]
        q = torch.where(removed, z, torch.clamp(torch.round(kept / s + z), 0, self.maxq))
        self.codes[:, col] = q.to(torch.uint8)
        return (q - z) * s


class _SparseGPT(HessianCollector):
    """The block-wise worker: one Hessian per input tensor, each layer pruned (and packed with ``bits``)."""

    def __init__(self, sparsity: float, prune_n: int, prune_m: int, block_size: int, damp: float, bits: int,
                 group_size: int, sym: bool, clip_search: bool) -> None:
        super().__init__(bits, group_size, sym)
        self.sparsity, self.prune_n, self.prune_m = sparsity, prune_n, prune_m
        self.block_size, self.damp, self.clip_search = block_size, damp, clip_search

    def quantize_block(self, model, block_name, block, names, shared, producers, probe=None) -> None:  # noqa: D102
        self._last = None
        for group in self.groups(names, shared):
            h = next(self.hessians[n] for n in group if n in self.hessians).h
            dead = torch.diagonal(h) == 0
            h[dead, dead] = 1.0
            importance = torch.diagonal(h).clone()
            hinv = inverse_hessian_factor(h, self.damp, overwrite=True)  # one factor for every layer of the group
            for n in group:
                self.specs[n] = self._prune(model, n, hinv, dead, importance)
        self.hessians.clear()

    def _prune(self, model: nn.Module, name: str, hinv: torch.Tensor, dead: torch.Tensor,
               importance: torch.Tensor) -> dict:
        module = model.get_submodule(name)
        target = weight_of(module)
        w = target.detach().float().masked_fill(dead.unsqueeze(0), 0.0)
        result = sparsegpt_prune(w, hinv, self.sparsity, self.prune_n, self.prune_m, self.block_size, self.bits,
                                 self.group_size, self.sym, importance, self.clip_search)
        if result.weight is not None:
            target.copy_(result.weight.to(target.dtype))
            return {"sparsity": float((target == 0).float().mean())}
        layer = pack_layer(module, result.codes, result.scales, result.zeros, self.bits,
                           row_groups(self.group_size, w.shape[1]))
        replace_module(model, name, layer)
        return {"sparsity": packed_zero_share(result.codes, result.zeros, layer.group_size), "packed": layer.spec()}


def packed_zero_share(codes: torch.Tensor, zeros: torch.Tensor, group_size: int) -> float:
    """Share of the weights a packed layer dequantizes to exactly 0 (code equal to its group's zero)."""
    z = zeros.float().repeat_interleave(group_size, dim=1)[:, : codes.shape[1]]
    return float((codes.float() == z).float().mean())


def prune_model_sparsegpt(model: nn.Module, calibration_ids: torch.Tensor, sparsity: float = 0.5, prune_n: int = 0,
                          prune_m: int = 0, block_size: int = 128, damp: float = 0.01, bits: int = 0,
                          group_size: int = 128, sym: bool = False, clip_search: bool = True,
                          exclude: Iterable[str] = ("lm_head",), batch_size: int = 1) -> tuple[Specs, list[str]]:
    """SparseGPT every selected Linear/Conv1D layer inside the transformer blocks, block by block, in place.

    Returns ``({layer: record}, outside)``: each record holds the layer's achieved ``sparsity`` (share of exact
    zeros) and, with ``bits``, the packed layer's replay spec (``"packed"``); ``outside`` are the selected layers
    outside every block (no calibrated inputs there), left dense.
    """
    return run_pruner(model, calibration_ids, sparsegpt_worker(sparsity, prune_n, prune_m, block_size, damp, bits,
                                                                group_size, sym, clip_search),
                      exclude, batch_size, "sparsegpt")


def sparsegpt_worker(sparsity: float = 0.5, prune_n: int = 0, prune_m: int = 0, block_size: int = 128,
                     damp: float = 0.01, bits: int = 0, group_size: int = 128, sym: bool = False,
                     clip_search: bool = True) -> LayerStatsCollector:
    """The block-wise SparseGPT worker (for :func:`run_pruner` or a streaming :class:`PruningStep`)."""
    check_pattern(sparsity, prune_n, prune_m)
    return _SparseGPT(sparsity, prune_n, prune_m, block_size, damp, bits, group_size, sym, clip_search)


def run_pruner(model: nn.Module, calibration_ids: torch.Tensor, worker: LayerStatsCollector, exclude: Iterable[str],
               batch_size: int, method: str) -> tuple[Specs, list[str]]:
    """Drive a block-wise pruning ``worker`` over the model's selected dense layers (eval mode, restored after)."""
    names = [t.name for t in require_targets(model, exclude, what=method)]
    was_training = model.training
    model.eval()
    try:
        outside = run_blockwise(model, calibration_ids, names, worker, batch_size)
    finally:
        model.train(was_training)
    return {n: worker.specs[n] for n in names if n in worker.specs}, outside


class PruningStep(BlockStep):
    """A block-wise pruner as the step of a streaming run: the in-memory worker on each block's calibration inputs.

    Its targets are the dense layers (Linear and subclasses, Conv1D; MoE experts are left dense), the same selection
    as :func:`run_pruner`; layers outside the blocks have no calibrated inputs and are left dense, as in memory.
    """

    calibrated = True

    def __init__(self, worker: LayerStatsCollector, calibration_ids: torch.Tensor, method: str,
                 exclude: tuple[str, ...] = ("lm_head",), batch_size: int = 1) -> None:
        self.worker, self.calibration_ids, self.method = worker, calibration_ids, method
        self.exclude, self.batch_size = tuple(exclude), batch_size
        self.bits, self.group_size = worker.bits, worker.group_size

    def targets(self, model: nn.Module) -> list[str]:  # noqa: D102
        return [t.name for t in require_targets(model, self.exclude, what=self.method)]

    def __call__(self, model: nn.Module, prefix: str, block: nn.Module, names: list[str],
                 inputs: InputStore | None = None, advance: bool = False) -> Specs:
        """Prune ``names`` of one block from its calibration inputs; returns their records."""
        if inputs is None:
            raise ValueError(f"{self.method} prunes a block from its calibration inputs; none were given.")
        process_block(model, prefix, block, names, inputs, self.worker, advance)
        return {n: self.worker.specs.pop(n) for n in names}

    def outside(self, model: nn.Module, names: list[str]) -> Specs:
        """Nothing: layers outside the blocks stay dense (warned once, recorded by the algorithm's coverage)."""
        if names:
            warnings.warn(f"{self.method}: layers outside the transformer blocks ({', '.join(names)}) have no "
                          "calibrated inputs and were left dense.", RuntimeWarning, stacklevel=2)
        return {}
