"""int8_static: post-training static int8 quantization of CNNs with torch.ao FX graph mode (fbgemm kernels)."""

from __future__ import annotations

import fnmatch
import warnings
from typing import Any

import torch
from ConfigSpace import CategoricalHyperparameter, UniformFloatHyperparameter, UniformIntegerHyperparameter

from slimkit.algorithms.quantization._calibration import calibration_batches, slice_inputs
from slimkit.algorithms.quantization._fallback import (
    first_samples,
    mean_cosine,
    model_outputs,
    rank_by_gain,
    restore_until,
)
from slimkit.algorithms.quantization._static_fx import (
    CONVS,
    calibrate,
    convert,
    fp32_units,
    freeze_observers,
    prepare,
    qconfig_mapping,
)
from slimkit.algorithms.quantization._static_tune import bias_correct, float_alone, quantized_layers
from slimkit.core.contract import SaveFn, SlimkitQuantizer, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean, ListHyperparameter
from slimkit.core.registry import register
from slimkit.errors import ConfigError, ModelNotSupportedError
from slimkit.utils import Inputs

SENSITIVITY_SAMPLES = 64  # images per single-layer sensitivity pass
BIAS_SAMPLES = 32  # images in the one bias-correction pass
MIN_COSINE = 0.98
MAX_FP32_LAYERS = 8

def _first_tensor(inputs: Inputs) -> torch.Tensor:
    if isinstance(inputs, torch.Tensor):
        return inputs
    if isinstance(inputs, (tuple, list)) and len(inputs) == 1 and isinstance(inputs[0], torch.Tensor):
        return inputs[0]
    raise ModelNotSupportedError(
        "int8_static quantizes models called with one image tensor; the calibration batches are "
        f"{type(inputs).__name__}. Pass data whose batches are (images, labels)."
    )


def _excluded(model: torch.nn.Module, patterns: tuple[str, ...]) -> list[str]:
    names = [n for n, _ in model.named_modules() if n]
    out = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    unknown = [p for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in names)]
    if unknown:
        leaf = [n for n, m in model.named_modules() if isinstance(m, (*CONVS, torch.nn.Linear))]
        raise ConfigError(f"int8_static exclude pattern(s) {unknown} match no module. Conv/Linear modules: "
                          f"{', '.join(leaf[:20])}{' ...' if len(leaf) > 20 else ''}.")
    return out


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
            ListHyperparameter("exclude", (), meta={"desc": "fnmatch patterns of module names kept in fp32, "
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
        model.eval()
        observer, budget, cap = smash_config["observer"], smash_config["min_cosine"], smash_config["max_fp32_layers"]
        exclude = _excluded(model, tuple(smash_config["exclude"]))
        batches, source = calibration_batches(model, smash_config, smash_config["calibration_samples"],
                                              batch_size=16, purpose="int8_static")
        images = [_first_tensor(b) for b in batches]
        reference = model_outputs(model, images)
        units = fp32_units(model)
        mapping = qconfig_mapping(observer, exclude)
        prepared = prepare(model, mapping, slice_inputs(images[0], 0, 1), observer)
        calibrate(prepared, images)
        freeze_observers(prepared)
        bias_images = torch.cat([b for b in images if b.shape[1:] == images[0].shape[1:]])[:BIAS_SAMPLES]
        means: dict[str, torch.Tensor] = {}  # fp32 per-channel means for bias correction, computed once

        def build(fp32: list[str]) -> Any:
            quantized = convert(prepared, mapping, [m for unit in fp32 for m in units.get(unit, [unit])])
            if smash_config["bias_correction"]:
                means.update(bias_correct(quantized, prepared, bias_images, means or None))
            return quantized

        smashed = build([])
        cosine = all_int8 = mean_cosine(smashed, images, reference)
        fp32: list[str] = []
        if cosine < budget and cap > 0:
            ranked = self._rank(smashed, prepared, images, reference, bias_images, means)
            best = {"layers": (), "model": smashed, "cosine": cosine}  # restore_until keeps a layer that improves

            def evaluate(layers: list[str]) -> float:
                candidate = build(layers)
                value = mean_cosine(candidate, images, reference)
                if value > best["cosine"]:
                    best.update(layers=tuple(layers), model=candidate, cosine=value)
                return value

            cosine, fp32 = restore_until(ranked, evaluate, budget, limit=cap, desc="int8_static: fp32 fallback",
                                         start=cosine)
            assert tuple(fp32) == best["layers"]
            smashed = best["model"]
            if cosine < budget:
                warnings.warn(f"int8_static kept {len(fp32)} layers in fp32 (max_fp32_layers={cap}) and the output "
                              f"cosine on the calibration images is {cosine:.4f} < min_cosine={budget}. Raise "
                              "max_fp32_layers, lower min_cosine, or calibrate on images closer to your inputs.",
                              stacklevel=3)
        example = slice_inputs(images[0], 0, 1)
        smash_config.state.update(
            calibration=source, calibration_images=sum(int(b.shape[0]) for b in images), excluded=exclude,
            input_shape=list(example.shape), input_dtype=str(example.dtype).split(".")[-1],
            cosine_all_int8=round(all_int8, 6), cosine=round(cosine, 6), fp32_layers=fp32,
            fp32_modules=[m for unit in fp32 for m in units.get(unit, [unit])],
            quantized_modules=sum(1 for m in smashed.modules()
                                  if ".quantized" in type(m).__module__ and "PackedParams" not in type(m).__name__),
        )
        return smashed

    @staticmethod
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

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Rebuild the same mixed int8/fp32 graph (dummy calibration); the saved scales, weights and biases load."""
        dummy = torch.zeros(state["input_shape"], dtype=getattr(torch, state["input_dtype"]))
        mapping = qconfig_mapping(smash_config["observer"], state["excluded"])
        prepared = prepare(model, mapping, dummy, smash_config["observer"])
        calibrate(prepared, [dummy], desc="int8_static: rebuilding")
        return convert(prepared, mapping, state.get("fp32_modules", []))
