"""One decoder block at a time: the low-bit quantizers as steps a streaming run drives block by block.

A step quantizes the target layers of ONE block of a model in place and returns their replay specs. It runs
exactly the code of the in-memory quantizers (:mod:`.quantize`): RTN and HQQ layer by layer, GPTQ and AWQ
through :func:`~.calibration.process_block` with the same workers, so a model streamed block by block from its
files gets the same packed tensors as the model quantized in memory, given the same calibration inputs. MoE
experts modules are quantized expert by expert as in memory (:mod:`.experts_quantize`).
"""

from __future__ import annotations

import torch
from torch import nn

from slimkit.core.weights import EXPERTS
from slimkit.engines.quantization.lowbit.calibration import InputStore, process_block
from slimkit.engines.quantization.lowbit.experts_quantize import (
    ExpertsCalibrator,
    WithExperts,
    require_layout,
)
from slimkit.engines.quantization.lowbit.layers import release_caches, require_targets
from slimkit.engines.quantization.lowbit.quantize import (
    _AWQ,
    _GPTQ,
    TARGET_KINDS,
    LayerFunctions,
    LayerStatsCollector,
    Specs,
    each_layer,
    hqq_functions,
    rtn_functions,
    rtn_outside,
    run_calibrated,
)

__all__ = ["BlockStep", "CalibratedStep", "LayerStep", "awq_step", "gptq_step", "hqq_step", "quantize_in_memory",
           "release_caches", "rtn_step"]


class BlockStep:
    """Quantize the targets of one block (``__call__``) and the targets outside every block (:meth:`outside`)."""

    #: whether the step needs the block's calibration inputs (then the run keeps them and advances them)
    calibrated: bool = False
    #: ``[n, seq_len]`` calibration token ids (calibrated steps), else None
    calibration_ids: torch.Tensor | None = None
    #: calibration samples per forward
    batch_size: int = 1
    #: the quantizer's name, for messages
    method: str = ""
    #: layers kept in full precision (exact names or glob patterns, as the algorithm's ``exclude``)
    exclude: tuple[str, ...] = ()
    bits: int
    group_size: int
    #: the experts modules among the targets (set by :meth:`targets`)
    experts: frozenset[str] = frozenset()

    def targets(self, model: nn.Module) -> list[str]:
        """The layers this step quantizes, in module order (works on a meta-device skeleton).

        The same selection as the in-memory quantizers (:func:`slimkit.core.weights.select` over the dense kinds,
        Linear and subclasses, Conv1D, and MoE experts modules; supported, not excluded); a ConfigError naming the
        layer types found when none is left.
        """
        chosen = require_targets(model, self.exclude, TARGET_KINDS, self.method)
        self.experts = frozenset(t.name for t in chosen if t.kind == EXPERTS)
        return [t.name for t in chosen]

    def finish(self) -> None:
        """Called once every block is done (warnings that sum up the run)."""

    def __call__(self, model: nn.Module, prefix: str, block: nn.Module, names: list[str],
                 inputs: InputStore | None = None, advance: bool = False) -> Specs:
        """Quantize ``names`` (full dotted names inside ``block``, which sits at ``prefix`` in ``model``)."""
        raise NotImplementedError

    def outside(self, model: nn.Module, names: list[str]) -> Specs:
        """Quantize targets outside the blocks (e.g. an ``lm_head`` the user did not exclude)."""
        raise NotImplementedError


class LayerStep(BlockStep):
    """A data-free quantizer (RTN, HQQ): each layer on its own weight, no forward pass."""

    def __init__(self, functions: LayerFunctions, bits: int, group_size: int, method: str,
                 exclude: tuple[str, ...] = ()) -> None:
        self.functions, self.bits, self.group_size, self.method, self.exclude = (functions, bits, group_size, method,
                                                                                 tuple(exclude))

    def __call__(self, model, prefix, block, names, inputs=None, advance=False) -> Specs:  # noqa: D102
        return self.outside(model, names)

    def outside(self, model: nn.Module, names: list[str]) -> Specs:  # noqa: D102
        return each_layer(model, names, self.experts, self.functions, self.bits, self.group_size)


class CalibratedStep(BlockStep):
    """A quantizer fed by the block's calibration inputs (GPTQ, AWQ): :func:`process_block` with its worker."""

    calibrated = True

    def __init__(self, worker: LayerStatsCollector, calibrator: ExpertsCalibrator, calibration_ids: torch.Tensor,
                 method: str, exclude: tuple[str, ...] = (), batch_size: int = 1) -> None:
        self.worker, self.calibration_ids, self.method, self.batch_size = worker, calibration_ids, method, batch_size
        self.exclude, self.calibrator = tuple(exclude), calibrator
        self.bits, self.group_size = worker.bits, worker.group_size

    def __call__(self, model, prefix, block, names, inputs=None, advance=False) -> Specs:  # noqa: D102
        if inputs is None:
            raise ValueError(f"{self.method} quantizes a block from its calibration inputs; none were given.")
        moe = [n for n in names if n in self.experts]
        for n in moe:  # the forward check of an experts module runs now, on its real weights, not inside a hook
            require_layout(model.get_submodule(n), n)
        quantizer = WithExperts(self.worker, self.calibrator, moe, self.worker.specs) if moe else self.worker
        process_block(model, prefix, block, names, inputs, quantizer, advance)
        return {n: self.worker.specs.pop(n) for n in names}

    def finish(self) -> None:
        """Name the experts that had too few calibration tokens (quantized with RTN), as the in-memory run does."""
        self.calibrator.warn_fallback(self.method)

    def outside(self, model: nn.Module, names: list[str]) -> Specs:
        """Round-to-nearest, as the in-memory run does: there are no calibrated inputs outside the blocks."""
        return rtn_outside(model, names, self.experts, self.worker, self.method)


def rtn_step(bits: int = 4, group_size: int = 128, sym: bool = False,
             exclude: tuple[str, ...] = ("lm_head",)) -> LayerStep:
    """RTN, one layer at a time (as :func:`~.quantize.quantize_model_rtn`)."""
    return LayerStep(rtn_functions(bits, group_size, sym), bits, group_size, "rtn", exclude)


def hqq_step(bits: int = 4, group_size: int = 128, iters: int = 20, optimize_scale: bool = False,
             exclude: tuple[str, ...] = ("lm_head",)) -> LayerStep:
    """HQQ, one layer at a time (as :func:`~.quantize.quantize_model_hqq`)."""
    return LayerStep(hqq_functions(bits, group_size, iters, optimize_scale), bits, group_size, "hqq", exclude)


def gptq_step(calibration_ids: torch.Tensor, bits: int = 4, group_size: int = 128, sym: bool = False,
              act_order: bool = True, damp: float = 0.01, block_size: int = 128, clip_search: bool = True,
              exclude: tuple[str, ...] = ("lm_head",), batch_size: int = 1,
              min_expert_tokens: int | None = None) -> CalibratedStep:
    """GPTQ on one block's calibration inputs (as :func:`~.quantize.quantize_model_gptq`)."""
    worker = _GPTQ(bits, group_size, sym, act_order, damp, block_size, clip_search)
    experts = ExpertsCalibrator("gptq", bits, group_size, sym, min_expert_tokens, act_order=act_order, damp=damp,
                                block_size=block_size, clip_search=clip_search)
    return CalibratedStep(worker, experts, calibration_ids, "gptq", exclude, batch_size)


def awq_step(calibration_ids: torch.Tensor, bits: int = 4, group_size: int = 128, sym: bool = False,
             n_grid: int = 10, clip_search: bool = True, exclude: tuple[str, ...] = ("lm_head",),
             batch_size: int = 1, fold_only: bool = False, min_expert_tokens: int | None = None) -> CalibratedStep:
    """AWQ on one block's calibration inputs (as :func:`~.quantize.quantize_model_awq`)."""
    experts = ExpertsCalibrator("awq", bits, group_size, sym, min_expert_tokens, n_grid=n_grid, clip_search=clip_search)
    return CalibratedStep(_AWQ(bits, group_size, sym, n_grid, clip_search, fold_only), experts, calibration_ids,
                          "awq", exclude, batch_size)


def quantize_in_memory(model: nn.Module, step: LayerStep | CalibratedStep) -> Specs:
    """Quantize every target of a model held in memory with ``step``'s settings (as the ``quantize_model_*``)."""
    if isinstance(step, CalibratedStep):
        return run_calibrated(model, step.calibration_ids, step.exclude, step.worker, step.batch_size, step.method,
                              step.calibrator)
    return step.outside(model, step.targets(model))
