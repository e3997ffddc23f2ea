"""Sensitivity-driven fp32 fallback shared by the calibrated int8 quantizers (int8_smooth, int8_static).

The pattern: measure how close the quantized model's output is to fp32 on calibration data (mean per-sample
cosine); if it misses the budget, rank the quantized layers by how much the output improves when each alone goes
back to fp32, then restore them in that order until the budget holds (or a cap on fp32 layers is reached).
How a layer is switched is the caller's business; this module only measures, ranks and loops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import torch

from slimkit.engines.quantization.int8.calibration import slice_inputs
from slimkit.evaluation.runtime import batch_size_of
from slimkit.utils import Inputs, main_tensor, run_model

T = TypeVar("T")


def progress(items: Iterable[T], desc: str, total: int | None = None) -> Iterable[T]:
    """Wrap a calibration or sensitivity loop in a tqdm progress bar (shown on terminals only, removed when done)."""
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, total=total, leave=False, disable=None, dynamic_ncols=True)


def main_float(output: Any) -> torch.Tensor:
    """The main tensor of a model output as a float tensor (quantized outputs are dequantized)."""
    out = main_tensor(output)
    return out.dequantize() if out.is_quantized else out.float()


def model_outputs(model: Any, batches: Sequence[Inputs]) -> list[torch.Tensor]:
    """``main_float`` of the model's output on every batch (no gradients)."""
    with torch.no_grad():
        return [main_float(run_model(model, b)) for b in batches]


def cosines(reference: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per-sample cosine similarity (all non-batch dims flattened, float64 sums) of two output lists."""
    cos = []
    for r, o in zip(reference, outputs, strict=True):
        a, b = r.reshape(r.shape[0], -1), o.reshape(o.shape[0], -1)
        dot = (a * b).double().sum(1)
        na, nb = a.double().pow(2).sum(1).sqrt(), b.double().pow(2).sum(1).sqrt()
        c = dot / (na * nb).clamp_min(1e-300)
        cos.append(torch.where((na == 0) & (nb == 0), torch.ones_like(c), c))
    return torch.cat(cos)


def mean_cosine(model: Any, batches: Sequence[Inputs], reference: Sequence[torch.Tensor]) -> float:
    """Mean per-sample output cosine of ``model`` against the fp32 ``reference`` outputs of ``batches``."""
    return float(cosines(reference, model_outputs(model, batches)).mean())


def first_samples(batches: Sequence[Inputs], reference: Sequence[torch.Tensor],
                  n: int) -> tuple[list[Inputs], list[torch.Tensor]]:
    """The first ``n`` samples of ``batches`` and of their reference outputs (for cheap sensitivity passes)."""
    few, few_ref, seen = [], [], 0
    for batch, ref in zip(batches, reference, strict=True):
        take = min(batch_size_of(batch), n - seen)
        few.append(slice_inputs(batch, 0, take))
        few_ref.append(ref[:take])
        seen += take
        if seen >= n:
            break
    return few, few_ref


def rank_by_gain(names: Sequence[str], measure: Callable[[str], float], desc: str) -> list[str]:
    """``names`` sorted by ``measure(name)`` (the fidelity with that layer alone in fp32), best first.

    The sort is stable: ties keep the model's layer order.
    """
    scores = {name: measure(name) for name in progress(names, desc)}
    return sorted(names, key=lambda n: -scores[n])


def restore_until(ranked: Sequence[str], evaluate: Callable[[list[str]], float], budget: float,
                  limit: int | None = None, desc: str = "fp32 fallback",
                  start: float | None = None) -> tuple[float, list[str]]:
    """Move ``ranked`` layers to fp32 one by one until ``evaluate(fp32_layers)`` reaches ``budget``.

    ``evaluate`` receives a list of fp32 layers (the newest last) and returns the fidelity of the model with
    exactly those layers in fp32. Without ``start`` every tried layer is kept and at most ``limit`` are tried.
    With ``start`` (the fidelity with no fp32 layer) a layer is kept only when it raises the best fidelity so far,
    at most ``limit`` layers are kept and at most ``2 * limit`` tried. Returns the fidelity of the kept list
    (0.0 when nothing was tried and no ``start`` given) and the kept fp32 layers.
    """
    fp32: list[str] = []
    fidelity = 0.0 if start is None else start
    if limit is None:
        candidates = list(ranked)
    else:
        candidates = list(ranked[: limit if start is None else 2 * limit])
    for name in progress(candidates, desc):
        trial = [*fp32, name]
        value = evaluate(trial)
        if start is not None and value <= fidelity:
            continue  # no gain: the layer stays int8
        fp32, fidelity = trial, value
        if fidelity >= budget or (limit is not None and len(fp32) >= limit):
            break
    return fidelity, fp32
