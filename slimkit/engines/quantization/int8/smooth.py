"""The int8_smooth engine: smoothing folded into producers, dynamic int8 Linear, and an fp32 fallback budget.

:func:`quantize_smooth` (1) folds SmoothQuant-style smoothing wherever it is exact, choosing alpha per layer
group by measured int8 error, (2) swaps every candidate Linear for :class:`Int8Linear` with the recipe this CPU
computes exactly (:func:`choose_path`), (3) restores the most sensitive layers to fp32 while the output cosine
against fp32 misses ``min_cosine``. It returns a JSON-able record; :func:`replay_smooth` rebuilds the structure
from it on a fresh model and says when this CPU needs the saved weights re-quantized.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from slimkit.engines.quantization.int8.calibration import slice_inputs, truncate_tokens
from slimkit.engines.quantization.int8.fallback import (
    first_samples,
    main_float,
    mean_cosine,
    model_outputs,
    rank_by_gain,
    restore_until,
)
from slimkit.engines.quantization.int8.linear import (
    FORCE_ENV,
    FULL_RANGE,
    SATURATION_SAFE,
    Int8Linear,
    choose_path,
    cpu_int8_capability,
    quantize_layers,
    saturation_safe_forced,
)
from slimkit.engines.quantization.int8.smoothing import (
    choose_alpha,
    collect_statistics,
    discover_groups,
    fold,
    smoothing_scales,
    verify_groups,
)
from slimkit.utils import Inputs

AUTO_ALPHAS = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
SENSITIVITY_SAMPLES = 8


class LayerSwitch:
    """Holds the fp32 and int8 version of every candidate layer and swaps them in the model."""

    def __init__(self, model: torch.nn.Module, names: list[str], saturation_safe: bool) -> None:
        self.model = model
        self.fp32 = {n: model.get_submodule(n) for n in names}
        self.int8 = {n: Int8Linear.from_linear(self.fp32[n], False, saturation_safe) for n in names}

    def set(self, name: str, quantized: bool) -> None:
        """Put layer ``name``'s int8 (``quantized``) or fp32 module into the model."""
        self.model.set_submodule(name, (self.int8 if quantized else self.fp32)[name])


def smooth_groups(model: torch.nn.Module, names: list[str], batches: list[Inputs], alphas: list[float] | None,
                  saturation_safe: bool, reference: list[torch.Tensor]) -> list[dict[str, Any]]:
    """Fold smoothing into every verified group of ``names``; ``alphas`` None picks per group from AUTO_ALPHAS.

    ``reference`` receives the fp32 outputs of ``batches`` (smoothing leaves them unchanged). Returns a record
    of the folded groups.
    """
    probe = truncate_tokens(slice_inputs(batches[0], 0, 1), 32)  # structure, not statistics: keep it small
    groups = verify_groups(model, discover_groups(model, names, probe), probe)
    if not groups:
        return []
    collect_statistics(model, groups, batches, on_output=lambda out: reference.append(main_float(out)))
    record = []
    for group in groups:
        if alphas is None:
            alpha, scales = choose_alpha(model, group, AUTO_ALPHAS, False, saturation_safe=saturation_safe)
        else:
            alpha, scales = alphas[0], smoothing_scales(model, group, alphas[0])
        if alpha is not None and scales is not None:
            fold(model, group, scales)
            record.append({"producer": group.producer, "consumers": group.consumers, "alpha": alpha})
    return record


def _fallback(switch: LayerSwitch, names: list[str], batches: list[Inputs], reference: list[torch.Tensor],
              budget: float) -> tuple[float, list[str]]:
    """Rank layers by the cosine gained when each alone returns to fp32; restore them until the budget holds."""
    few, few_ref = first_samples(batches, reference, SENSITIVITY_SAMPLES)

    def alone(name: str) -> float:
        switch.set(name, False)
        try:
            return mean_cosine(switch.model, few, few_ref)
        finally:
            switch.set(name, True)

    def restored(fp32: list[str]) -> float:
        switch.set(fp32[-1], False)
        return mean_cosine(switch.model, batches, reference)

    ranked = rank_by_gain(names, alone, "int8_smooth: layer sensitivity")
    return restore_until(ranked, restored, budget, desc="int8_smooth: fp32 fallback")


def quantize_smooth(model: torch.nn.Module, names: list[str], batches: list[Inputs], *, min_cosine: float = 0.99,
                    smooth: bool = True, alpha: float | None = None,
                    saturation_safe: bool | None = None) -> dict[str, Any]:
    """Smooth and int8-quantize the Linear layers ``names`` of ``model`` in place; returns the replay record.

    ``alpha`` None chooses it per group; ``saturation_safe`` None follows the CPU probe and
    ``SLIMKIT_INT8_SATURATION_SAFE``.
    """
    model.eval()
    path = choose_path(saturation_safe)
    safe = path == SATURATION_SAFE
    state: dict[str, Any] = {"int8_path": path, "cpu_int8": cpu_int8_capability(), "reduce_range": False,
                             "smoothed": []}
    reference: list[torch.Tensor] = []
    if smooth:
        state["smoothed"] = smooth_groups(model, names, batches, None if alpha is None else [alpha], safe, reference)
    if not reference:
        reference = model_outputs(model, batches)
    switch = LayerSwitch(model, names, safe)
    for name in names:
        switch.set(name, True)
    cosine = mean_cosine(model, batches, reference)
    state["cosine_all_int8"] = round(cosine, 6)
    fp32: list[str] = []
    if cosine < min_cosine:
        cosine, fp32 = _fallback(switch, names, batches, reference, min_cosine)
    if len(fp32) > len(names) // 2:
        warnings.warn(f"int8_smooth kept {len(fp32)} of {len(names)} Linear layers in fp32 to reach "
                      f"min_cosine={min_cosine}; expect little speed-up. Lower min_cosine or calibrate on data "
                      "closer to your inputs.", stacklevel=3)
    state.update(cosine=round(cosine, 6), fp32_layers=fp32, int8_layers=[n for n in names if n not in fp32])
    return state


def replay_smooth(model: torch.nn.Module, state: dict[str, Any]) -> torch.nn.Module:
    """Rebuild the int8 layers of a :func:`quantize_smooth` record on a fresh ``model`` (weights load next).

    A full-range save loaded where 8-bit activations would saturate (or with ``SLIMKIT_INT8_SATURATION_SAFE``)
    re-quantizes the loaded weights saturation-safe and warns, naming both CPUs' int8 capability.
    """
    saved = state.get("int8_path", FULL_RANGE)
    requantize = saved == FULL_RANGE and not state.get("reduce_range") and choose_path() == SATURATION_SAFE
    if requantize:
        why = (f"{FORCE_ENV} is set" if saturation_safe_forced()
               else "its int8 kernel saturates int16 pair sums with 8-bit activations")
        warnings.warn(f"int8_smooth: this model was quantized for 8-bit activations on a CPU where they are exact "
                      f"({state.get('cpu_int8', 'capability not recorded')}); on this CPU "
                      f"({cpu_int8_capability()}) {why}, so the loaded int8 weights are re-quantized to "
                      "saturation-safe (pair-safe) levels: outputs differ slightly from the saved model's.",
                      RuntimeWarning, stacklevel=3)
    return quantize_layers(model, state["int8_layers"], bool(state.get("reduce_range", False)),
                           saturation_safe=saved == SATURATION_SAFE, requantize_on_load=requantize)
