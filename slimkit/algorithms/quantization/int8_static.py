"""int8_static: post-training static int8 quantization of CNNs with torch.ao FX graph mode (fbgemm kernels)."""

from __future__ import annotations

from typing import Any

import torch
from ConfigSpace import CategoricalHyperparameter, UniformFloatHyperparameter, UniformIntegerHyperparameter

from slimkit.algorithms.quantization._targets import model_targets, record_coverage
from slimkit.core.contract import SaveFn, SlimkitQuantizer, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean, ListHyperparameter
from slimkit.core.registry import register
from slimkit.core.selection import matches
from slimkit.core.weights import FALLBACK, UNSUPPORTED
from slimkit.engines.quantization.int8.calibration import calibration_batches
from slimkit.engines.quantization.int8.static import converted, quantize_static, rebuild_static
from slimkit.engines.quantization.int8.static_fx import CONVS

MIN_COSINE = 0.98
MAX_FP32_LAYERS = 8


@register
class Int8Static(SlimkitQuantizer):
    """Static int8 quantization of CNNs: conv-bn(-relu) fusion, observer calibration, fbgemm int8 kernels.

    The model is traced with torch.fx; convolutions, Linear layers, additions and activations then run in int8
    end to end: activations with scales calibrated on data (outputs clipped by ReLU6 observed as clipped), weights
    per channel with as many levels as fbgemm computes without saturation. Biases are then corrected on the
    calibration images, and while the output cosine against fp32 on them is below ``min_cosine`` the most
    sensitive layers go back to fp32 (at most ``max_fp32_layers``). Needs calibration images (``cfg.add_data``;
    zoo models fall back to their own example inputs) and an FX-traceable model.
    """

    algorithm_name = "int8_static"
    dataset_used = True
    references = {
        "PyTorch FX quantization": "https://pytorch.org/docs/stable/quantization.html#prototype-fx-graph-mode-quantization",
        "fbgemm": "https://github.com/pytorch/FBGEMM",
        "Data-Free Quantization (bias correction)": "https://arxiv.org/abs/1906.04721",
    }
    run_on_cpu = True
    run_on_cuda = False
    save_fn = SaveFn.REPLAY

    def get_hyperparameters(self) -> list:
        """Observer, calibration size, fidelity budget, fp32 fallback cap, bias correction and exclusions."""
        return [
            CategoricalHyperparameter("observer", ["histogram", "minmax"], default_value="histogram", meta={
                "desc": "Activation range estimate: 'histogram' minimises quantization error (slower calibration), "
                        "'minmax' keeps the full observed range."}),
            UniformIntegerHyperparameter("calibration_samples", 1, 100000, default_value=64, meta={
                "desc": "Calibration images run through the observers; they also measure the fidelity budget."}),
            UniformFloatHyperparameter("min_cosine", 0.5, 1.0, default_value=MIN_COSINE, meta={
                "desc": "Fidelity budget: mean output cosine vs fp32 on the calibration images; the most sensitive "
                        "layers go back to fp32 until it holds (or max_fp32_layers are fp32)."}),
            UniformIntegerHyperparameter("max_fp32_layers", 0, 100000, default_value=MAX_FP32_LAYERS, meta={
                "desc": "Most conv/linear layers (with their BN and activation) the fallback may keep in fp32; "
                        "0 turns the fallback off. Each one costs speed."}),
            Boolean("bias_correction", True, meta={
                "desc": "Correct each int8 layer's bias so its mean output per channel matches fp32 on the "
                        "calibration images."}),
            ListHyperparameter("exclude", (), meta={"desc": "Module names kept in fp32: exact names or glob patterns, "
                                                            "e.g. ['features.0.*']."}),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """Needs a float32 convolution and a model that torch.fx can trace."""
        if not isinstance(model, torch.nn.Module) or isinstance(model, torch.fx.GraphModule):
            return False
        if not any(isinstance(m, CONVS) and m.weight.dtype == torch.float32 for m in model.modules()):
            return False
        try:
            torch.fx.symbolic_trace(model)
        except Exception:
            return False
        return True

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return ("It quantizes float32 CNNs that torch.fx can trace (no data-dependent Python control flow); "
                "use int8_smooth or int8_dynamic for transformers.")

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        targets = model_targets(model)  # the Linear-like layers (its convolutions are recorded by quantize_static)
        batches, source = calibration_batches(
            model, smash_config["calibration_samples"], data=smash_config.data, tokenizer=smash_config.tokenizer,
            example=smash_config.example_inputs, batch_size=16, purpose="int8_static")
        smashed, record = quantize_static(
            model, batches, observer=smash_config["observer"], min_cosine=smash_config["min_cosine"],
            max_fp32_layers=smash_config["max_fp32_layers"], bias_correction=smash_config["bias_correction"],
            exclude=tuple(smash_config["exclude"]))
        smash_config.state.update(calibration=source, **record)
        fp32 = set(record["fp32_modules"])
        reasons = {t.name: f"{FALLBACK} (most sensitive layers in fp32 until the output cosine reaches min_cosine="
                           f"{smash_config['min_cosine']})" if t.name in fp32 else
                   f"{UNSUPPORTED}: torch.ao FX static int8 did not convert this {t.type_name}" for t in targets}
        exclude = tuple(smash_config["exclude"])
        done = converted(smashed, [t.name for t in targets])
        record_coverage(smash_config.state, targets, done, exclude,
                        reasons={n: r for n, r in reasons.items() if n in fp32 or not matches(n, exclude)})
        return smashed

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Rebuild the same mixed int8/fp32 graph (dummy calibration); the saved scales, weights and biases load."""
        return rebuild_static(model, state, smash_config["observer"])
