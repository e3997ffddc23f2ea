"""int8_smooth: calibrated dynamic int8 Linear (fbgemm) with folded smoothing and an fp32 fallback budget."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from ConfigSpace import UniformFloatHyperparameter, UniformIntegerHyperparameter

from slimkit.algorithms.quantization._calibration import calibration_batches, slice_inputs, truncate_tokens
from slimkit.algorithms.quantization._fallback import (
    first_samples,
    main_float,
    mean_cosine,
    model_outputs,
    rank_by_gain,
    restore_until,
)
from slimkit.algorithms.quantization._int8_linear import Int8Linear, full_range_is_exact, quantize_layers, set_module
from slimkit.algorithms.quantization._smooth_utils import (
    choose_alpha,
    collect_statistics,
    discover_groups,
    fold,
    smoothing_scales,
    verify_groups,
)
from slimkit.algorithms.quantization.int8_dynamic import _linear_names
from slimkit.core.contract import SaveFn, SlimkitQuantizer, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean, ListHyperparameter
from slimkit.core.registry import register
from slimkit.utils import Inputs

AUTO_ALPHAS = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
SENSITIVITY_SAMPLES = 8


class _Switch:
    """Holds the fp32 and int8 version of every candidate layer and swaps them in the model."""

    def __init__(self, model: torch.nn.Module, names: list[str], reduce_range: bool) -> None:
        self.model = model
        self.fp32 = {n: model.get_submodule(n) for n in names}
        self.int8 = {n: Int8Linear.from_linear(self.fp32[n], reduce_range) for n in names}

    def set(self, name: str, quantized: bool) -> None:
        set_module(self.model, name, (self.int8 if quantized else self.fp32)[name])


@register
class Int8Smooth(SlimkitQuantizer):
    """Calibrated dynamic int8 Linear (fbgemm) that keeps the output within a fidelity budget.

    On calibration data it (1) folds SmoothQuant-style activation smoothing into the op that produces each
    Linear's input wherever that is exact (norm weights, value/up projections; verified numerically, so post-LN
    residual paths are never touched), choosing alpha per layer group by measured int8 error; (2) quantizes
    weights per output channel and activations with full 8 bits; (3) measures output cosine against fp32 and,
    while it is below ``min_cosine``, restores the most sensitive layers to fp32. Calibration data comes from
    ``cfg.add_data``, else PyDocText through ``cfg.add_tokenizer``, else a zoo model's own entry.
    """

    algorithm_name = "int8_smooth"
    references = {
        "SmoothQuant": "https://arxiv.org/abs/2211.10438",
        "fbgemm": "https://github.com/pytorch/FBGEMM",
    }
    run_on_cpu = True
    run_on_cuda = False
    save_fn = SaveFn.REPLAY

    def get_hyperparameters(self) -> list:
        """Fidelity budget, smoothing and calibration size."""
        return [
            UniformFloatHyperparameter("min_cosine", 0.5, 1.0, default_value=0.99, meta={
                "desc": "Fidelity budget: mean output cosine vs fp32 on the calibration data; the most sensitive "
                        "layers go back to fp32 until it holds."}),
            Boolean("smooth", True, meta={"desc": "Fold activation smoothing into producing ops where exact."}),
            Boolean("auto_alpha", True, meta={"desc": f"Pick alpha per layer group from {AUTO_ALPHAS} (or no "
                                                      "smoothing) by measured int8 error; off: use alpha."}),
            UniformFloatHyperparameter("alpha", 0.0, 1.0, default_value=0.5, meta={
                "desc": "Smoothing strength when auto_alpha is off: 0 keeps activations, 1 moves all range to "
                        "weights."}),
            UniformIntegerHyperparameter("calibration_samples", 1, 4096, default_value=32, meta={
                "desc": "Calibration samples (sequences or images) used for statistics and the budget."}),
            ListHyperparameter("exclude", (), meta={"desc": "fnmatch patterns of Linear layers always kept in fp32, "
                                                            "e.g. ['lm_head']."}),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """Needs at least one float32 nn.Linear."""
        return isinstance(model, torch.nn.Module) and any(
            type(m) is torch.nn.Linear and m.weight.dtype == torch.float32 for m in model.modules()
        )

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return "It quantizes float32 nn.Linear layers and the model has none."

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        model.eval()
        names = _linear_names(model, tuple(smash_config["exclude"]))
        batches, source = calibration_batches(model, smash_config, smash_config["calibration_samples"],
                                              purpose="int8_smooth")
        reduce_range = not full_range_is_exact()
        state: dict[str, Any] = {"calibration": source, "reduce_range": reduce_range, "smoothed": []}
        reference: list[torch.Tensor] = []  # fp32 outputs; smoothing leaves them unchanged
        if smash_config["smooth"]:
            state["smoothed"] = self._smooth(model, names, batches, smash_config, reduce_range, reference)
        if not reference:
            reference = model_outputs(model, batches)
        switch = _Switch(model, names, reduce_range)
        for name in names:
            switch.set(name, True)
        cosine = mean_cosine(model, batches, reference)
        state["cosine_all_int8"] = round(cosine, 6)
        fp32: list[str] = []
        if cosine < smash_config["min_cosine"]:
            cosine, fp32 = self._fallback(switch, names, batches, reference, smash_config["min_cosine"])
        if len(fp32) > len(names) // 2:
            warnings.warn(f"int8_smooth kept {len(fp32)} of {len(names)} Linear layers in fp32 to reach "
                          f"min_cosine={smash_config['min_cosine']}; expect little speed-up. Lower min_cosine or "
                          "calibrate on data closer to your inputs.", stacklevel=2)
        state.update(cosine=round(cosine, 6), fp32_layers=fp32, int8_layers=[n for n in names if n not in fp32])
        smash_config.state.update(state)
        return model

    def _smooth(self, model: torch.nn.Module, names: list[str], batches: list[Inputs],
                smash_config: SmashConfigPrefixWrapper, reduce_range: bool,
                reference: list[torch.Tensor]) -> list[dict[str, Any]]:
        probe = truncate_tokens(slice_inputs(batches[0], 0, 1), 32)  # structure, not statistics: keep it small
        groups = verify_groups(model, discover_groups(model, names, probe), probe)
        if not groups:
            return []
        collect_statistics(model, groups, batches, on_output=lambda out: reference.append(main_float(out)))
        alphas = AUTO_ALPHAS if smash_config["auto_alpha"] else [float(smash_config["alpha"])]
        record = []
        for group in groups:
            if smash_config["auto_alpha"]:
                alpha, scales = choose_alpha(model, group, alphas, reduce_range)
            else:
                alpha, scales = alphas[0], smoothing_scales(model, group, alphas[0])
            if alpha is not None and scales is not None:
                fold(model, group, scales)
                record.append({"producer": group.producer, "consumers": group.consumers, "alpha": alpha})
        return record

    def _fallback(self, switch: _Switch, names: list[str], batches: list[Inputs], reference: list[torch.Tensor],
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

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Rebuild which layers are int8 (smoothing lives in the saved weights); the weights then load strictly."""
        return quantize_layers(model, state["int8_layers"], bool(state["reduce_range"]))
