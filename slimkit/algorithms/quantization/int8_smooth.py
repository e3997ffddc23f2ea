"""int8_smooth: calibrated dynamic int8 Linear (fbgemm) with folded smoothing and an fp32 fallback budget."""

from __future__ import annotations

from typing import Any

import torch
from ConfigSpace import UniformFloatHyperparameter, UniformIntegerHyperparameter

from slimkit.algorithms.quantization._targets import TargetsMixin, model_targets, record_coverage, select_or_refuse
from slimkit.core.contract import SaveFn, SlimkitQuantizer, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean, ListHyperparameter
from slimkit.core.registry import register
from slimkit.core.weights import DENSE, FALLBACK, UNSUPPORTED, Target, weight_of
from slimkit.engines.quantization.int8.calibration import calibration_batches
from slimkit.engines.quantization.int8.smooth import AUTO_ALPHAS, quantize_smooth, replay_smooth


@register
class Int8Smooth(TargetsMixin, SlimkitQuantizer):
    """Calibrated dynamic int8 Linear (fbgemm) that keeps the output within a fidelity budget.

    On calibration data it (1) folds SmoothQuant-style activation smoothing into the op that produces each
    Linear's input wherever that is exact (norm weights, value/up projections; verified numerically, so post-LN
    residual paths are never touched), choosing alpha per layer group by measured int8 error; (2) quantizes
    activations with full 8 bits and weights per output channel with the recipe this CPU computes exactly
    (127 levels on VNNI/AMX; pair-safe 64..127 levels where fbgemm's AVX2 kernel saturates int16 pair sums);
    (3) measures output cosine against fp32 and, while it is below ``min_cosine``, restores the most sensitive
    layers to fp32. Calibration data comes from ``cfg.add_data``, else PyDocText through ``cfg.add_tokenizer``,
    else the example inputs. The save records the recipe; a CPU that cannot run it exactly re-quantizes and
    warns. ``SLIMKIT_INT8_SATURATION_SAFE=1`` forces the saturation-safe recipe on any CPU.
    """

    algorithm_name = "int8_smooth"
    dataset_used = True
    references = {
        "SmoothQuant": "https://arxiv.org/abs/2211.10438",
        "fbgemm": "https://github.com/pytorch/FBGEMM",
    }
    run_on_cpu = True
    run_on_cuda = False
    save_fn = SaveFn.REPLAY
    target_kinds = DENSE
    supported_models = ("It quantizes float32 nn.Linear layers (and subclasses computing x W^T + b) and transformers "
                        "Conv1D layers; the model has none it can replace.")

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
            ListHyperparameter("exclude", (), meta={
                "desc": "Linear layers always kept in fp32: exact names or glob patterns, e.g. ['lm_head']."}),
        ]

    def usable(self, target: Target, model: Any) -> bool:
        """Only float32 weights (the calibration and the fp32 fallback compare against float32)."""
        return weight_of(model.get_submodule(target.name)).dtype == torch.float32

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        exclude = tuple(smash_config["exclude"])
        targets = model_targets(model)
        chosen = select_or_refuse(targets, DENSE, exclude, self.algorithm_name)
        names = [t.name for t in chosen if self.usable(t, model)]
        reasons = {t.name: f"{UNSUPPORTED}: int8_smooth needs a float32 weight, this one is "
                           f"{weight_of(model.get_submodule(t.name)).dtype}" for t in chosen if t.name not in names}
        batches, source = calibration_batches(
            model, smash_config["calibration_samples"], data=smash_config.data, tokenizer=smash_config.tokenizer,
            example=smash_config.example_inputs, purpose="int8_smooth")
        state = quantize_smooth(model, names, batches, min_cosine=smash_config["min_cosine"],
                                smooth=smash_config["smooth"],
                                alpha=None if smash_config["auto_alpha"] else float(smash_config["alpha"]),
                                saturation_safe=None)  # the CPU probe, or SLIMKIT_INT8_SATURATION_SAFE=1
        smash_config.state.update(calibration=source, **state)
        reasons.update({n: f"{FALLBACK} (most sensitive layers in fp32 until the output cosine reaches "
                           f"min_cosine={smash_config['min_cosine']})" for n in state["fp32_layers"]})
        record_coverage(smash_config.state, targets, state["int8_layers"], exclude, reasons=reasons)
        return model

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Rebuild which layers are int8 (smoothing lives in the saved weights); the weights then load strictly."""
        return replay_smooth(model, state)
