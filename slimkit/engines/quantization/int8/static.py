"""The int8_static engine: FX static int8 of a CNN, bias correction, and a sensitivity-ranked fp32 fallback.

:func:`quantize_static` returns the converted model and a JSON-able record; :func:`rebuild_static` rebuilds the
same mixed int8/fp32 graph from that record on a fresh model (the saved scales, weights and biases load next).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from slimkit.core.selection import matches, unmatched
from slimkit.engines.quantization.int8.calibration import slice_inputs
from slimkit.engines.quantization.int8.fallback import (
    first_samples,
    mean_cosine,
    model_outputs,
    rank_by_gain,
    restore_until,
)
from slimkit.engines.quantization.int8.static_fx import (
    CONVS,
    calibrate,
    convert,
    fp32_units,
    freeze_observers,
    prepare,
    qconfig_mapping,
)
from slimkit.engines.quantization.int8.static_tune import bias_correct, float_alone, quantized_layers
from slimkit.errors import ConfigError, ModelNotSupportedError
from slimkit.utils import Inputs

SENSITIVITY_SAMPLES = 64  # images per single-layer sensitivity pass
BIAS_SAMPLES = 32  # images in the one bias-correction pass


def first_tensor(inputs: Inputs) -> torch.Tensor:
    """The image tensor of one calibration batch (a tensor or a 1-tuple); anything else is not supported."""
    if isinstance(inputs, torch.Tensor):
        return inputs
    if isinstance(inputs, (tuple, list)) and len(inputs) == 1 and isinstance(inputs[0], torch.Tensor):
        return inputs[0]
    raise ModelNotSupportedError(
        "int8_static quantizes models called with one image tensor; the calibration batches are "
        f"{type(inputs).__name__}. Pass data whose batches are (images, labels)."
    )


def excluded_modules(model: torch.nn.Module, patterns: tuple[str, ...]) -> list[str]:
    """Module names named by ``patterns`` (:mod:`slimkit.core.selection`); one matching nothing raises ConfigError."""
    names = [n for n, _ in model.named_modules() if n]
    out = [n for n in names if matches(n, patterns)]
    unknown = unmatched(names, patterns)
    if unknown:
        leaf = [n for n, m in model.named_modules() if isinstance(m, (*CONVS, torch.nn.Linear))]
        raise ConfigError(f"int8_static exclude pattern(s) {unknown} match no module. Conv/Linear modules: "
                          f"{', '.join(leaf[:20])}{' ...' if len(leaf) > 20 else ''}.")
    return out


def _rank(smashed: Any, prepared: Any, images: list[torch.Tensor], reference: list[torch.Tensor],
          bias_images: torch.Tensor, means: dict[str, torch.Tensor]) -> list[str]:
    """Quantized layers by the calibration cosine reached when each alone runs in float, best first.

    Each trial re-runs bias correction (when on), as the real fallback does. Measured on MobileNetV2: ranked
    on the corrected model without re-correcting, 8 fp32 layers reached cosine 0.9863; re-correcting each
    trial, 3 layers reach 0.9894 (all int8: 0.9859). Fewer than ~64 images make the ranking noise.
    """
    few, few_ref = first_samples(images, reference, SENSITIVITY_SAMPLES)
    layers = quantized_layers(smashed)
    saved = [(smashed.get_submodule(n), smashed.get_submodule(n).weight(), smashed.get_submodule(n).bias())
             for n in layers]

    def measure() -> float:
        if not means:  # bias correction off
            return mean_cosine(smashed, few, few_ref)
        try:
            bias_correct(smashed, prepared, bias_images, means)
            return mean_cosine(smashed, few, few_ref)
        finally:
            for module, weight, bias in saved:
                module.set_weight_bias(weight, bias)

    return rank_by_gain(layers, float_alone(smashed, prepared, measure), "int8_static: layer sensitivity")


def quantize_static(model: torch.nn.Module, batches: list[Inputs], *, observer: str = "histogram",
                    min_cosine: float = 0.98, max_fp32_layers: int = 8, bias_correction: bool = True,
                    exclude: tuple[str, ...] = ()) -> tuple[Any, dict[str, Any]]:
    """Static int8 of ``model`` calibrated on image ``batches``; returns the converted model and its record."""
    model.eval()
    excluded = excluded_modules(model, exclude)
    images = [first_tensor(b) for b in batches]
    reference = model_outputs(model, images)
    units = fp32_units(model)
    mapping = qconfig_mapping(observer, excluded)
    prepared = prepare(model, mapping, slice_inputs(images[0], 0, 1), observer)
    calibrate(prepared, images)
    freeze_observers(prepared)
    bias_images = torch.cat([b for b in images if b.shape[1:] == images[0].shape[1:]])[:BIAS_SAMPLES]
    means: dict[str, torch.Tensor] = {}  # fp32 per-channel means for bias correction, computed once

    def build(fp32: list[str]) -> Any:
        quantized = convert(prepared, mapping, [m for unit in fp32 for m in units.get(unit, [unit])])
        if bias_correction:
            means.update(bias_correct(quantized, prepared, bias_images, means or None))
        return quantized

    smashed = build([])
    cosine = all_int8 = mean_cosine(smashed, images, reference)
    fp32: list[str] = []
    if cosine < min_cosine and max_fp32_layers > 0:
        ranked = _rank(smashed, prepared, images, reference, bias_images, means)
        best = {"layers": (), "model": smashed, "cosine": cosine}  # restore_until keeps a layer that improves

        def evaluate(layers: list[str]) -> float:
            candidate = build(layers)
            value = mean_cosine(candidate, images, reference)
            if value > best["cosine"]:
                best.update(layers=tuple(layers), model=candidate, cosine=value)
            return value

        cosine, fp32 = restore_until(ranked, evaluate, min_cosine, limit=max_fp32_layers,
                                     desc="int8_static: fp32 fallback", start=cosine)
        assert tuple(fp32) == best["layers"]
        smashed = best["model"]
        if cosine < min_cosine:
            warnings.warn(f"int8_static kept {len(fp32)} layers in fp32 (max_fp32_layers={max_fp32_layers}) and "
                          f"the output cosine on the calibration images is {cosine:.4f} < min_cosine={min_cosine}. "
                          "Raise max_fp32_layers, lower min_cosine, or calibrate on images closer to your inputs.",
                          stacklevel=4)
    example = slice_inputs(images[0], 0, 1)
    record = dict(
        calibration_images=sum(int(b.shape[0]) for b in images), excluded=excluded,
        input_shape=list(example.shape), input_dtype=str(example.dtype).split(".")[-1],
        cosine_all_int8=round(all_int8, 6), cosine=round(cosine, 6), fp32_layers=fp32,
        fp32_modules=[m for unit in fp32 for m in units.get(unit, [unit])],
        quantized_modules=sum(1 for m in smashed.modules()
                              if ".quantized" in type(m).__module__ and "PackedParams" not in type(m).__name__),
    )
    return smashed, record


def converted(smashed: torch.nn.Module, names: list[str]) -> list[str]:
    """The ``names`` that are torch.ao quantized modules in the converted graph ``smashed`` (fused ones included)."""
    modules = dict(smashed.named_modules())
    return [n for n in names if n in modules and ".quantized" in type(modules[n]).__module__]


def rebuild_static(model: torch.nn.Module, record: dict[str, Any], observer: str) -> Any:
    """The same mixed int8/fp32 graph as a :func:`quantize_static` record (dummy calibration; weights load next)."""
    dummy = torch.zeros(record["input_shape"], dtype=getattr(torch, record["input_dtype"]))
    mapping = qconfig_mapping(observer, record["excluded"])
    prepared = prepare(model, mapping, dummy, observer)
    calibrate(prepared, [dummy], desc="int8_static: rebuilding")
    return convert(prepared, mapping, record.get("fp32_modules", []))
