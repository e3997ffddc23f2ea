"""quanto: Hugging Face optimum-quanto weight (2/4/8-bit, fp8) and activation quantization of Linear layers."""

from __future__ import annotations

from typing import Any

import torch
from ConfigSpace import CategoricalHyperparameter, OrdinalHyperparameter, UniformIntegerHyperparameter

from slimkit.algorithms.quantization._targets import (
    TargetsMixin,
    choose,
    layer_choice_hyperparameters,
    model_targets,
    record_coverage,
    replay_layers,
)
from slimkit.core.contract import SaveFn, SlimkitQuantizer, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean
from slimkit.core.registry import register
from slimkit.core.weights import LINEAR
from slimkit.engines._patch import patch_forward
from slimkit.engines.quantization.int8.calibration import calibration_batches
from slimkit.utils import run_model

#: Pruna's ``weight_bits`` values (optimum-quanto's qtype names)
WEIGHT_BITS = ("qint2", "qint4", "qint8", "qfloat8")
#: ``act_bits``: "none" keeps activations in the model's dtype (Pruna's ``None``)
ACT_BITS = ("none", "qint8", "qfloat8")


def _output_unquantized(module: torch.nn.Module) -> bool:
    """Whether quanto's streamlined calibration turned off ``module``'s output quantization (not in its state dict)."""
    handle = getattr(module, "_quantize_hooks", {}).get("output")
    return handle is not None and handle.id not in module._forward_hooks


def _outside_inference_mode(module: torch.nn.Module, inner: Any, args: tuple, kwargs: dict) -> Any:
    """Run a quanto layer under no_grad instead of inference mode (evaluation and serving use inference mode).

    Its int2/int4 matmul is an autograd Function, which fails on inference tensors ("Cannot set version_counter
    for inference tensor", optimum-quanto 0.2.7).
    """
    if not torch.is_inference_mode_enabled():
        return inner(*args, **kwargs)
    with torch.inference_mode(False), torch.no_grad():
        return inner(*args, **kwargs)


def _batches(model: torch.nn.Module, smash_config: SmashConfigPrefixWrapper) -> tuple[list[Any], str]:
    return calibration_batches(model, smash_config["calibration_samples"], data=smash_config.data,
                               tokenizer=smash_config.tokenizer, example=smash_config.example_inputs,
                               batch_size=8, purpose="quanto activation calibration")


@register
class Quanto(TargetsMixin, SlimkitQuantizer):
    """Quantize nn.Linear layers with optimum-quanto: int2/int4/int8/fp8 weights, optionally int8/fp8 activations.

    Weights are quantized per output channel (int8, fp8) or, for int2/int4 (with a zero point), per group of up
    to 128 inputs (quanto picks the largest multiple of 32 that divides the layer's inputs), and frozen into
    quanto's packed tensors. With ``act_bits`` set, activation scales are calibrated on
    ``cfg.data`` (else a tokenizer's calibration text, else the example inputs) inside quanto's ``Calibration``
    context before freezing. Saved as quanto's own state dict (plain int8/uint8/fp8 tensors and scales).
    """

    algorithm_name = "quanto"
    extra = "quanto"
    dataset_used = True
    references = {"GitHub": "https://github.com/huggingface/optimum-quanto"}
    save_fn = SaveFn.REPLAY
    target_kinds = (LINEAR,)
    supported_models = "It quantizes nn.Linear layers (quanto replaces exact nn.Linear); the model has none."

    def get_hyperparameters(self) -> list:
        """Pruna's weight_bits, act_bits, calibrate and calibration_samples, plus exclusions."""
        return [
            OrdinalHyperparameter("weight_bits", list(WEIGHT_BITS), default_value="qfloat8", meta={
                "desc": "Weight type: qint2 / qint4 (grouped, with zero points), qint8 (per channel) or qfloat8 "
                        "(float8 e4m3, per channel)."}),
            CategoricalHyperparameter("act_bits", list(ACT_BITS), default_value="none", meta={
                "desc": "Activation type: 'none' keeps activations in the model's dtype; qint8 / qfloat8 quantize "
                        "each Linear's input and output with calibrated scales."}),
            Boolean("calibrate", True, meta={"desc": "Calibrate the activation scales on data before freezing "
                                                     "(only used when act_bits is set)."}),
            UniformIntegerHyperparameter("calibration_samples", 1, 100000, default_value=64, meta={
                "desc": "Samples run through the model to calibrate activation scales."}),
            *layer_choice_hyperparameters("['lm_head']"),
        ]

    def import_algorithm_packages(self) -> dict[str, Any]:
        """Import optimum-quanto (pip install 'slimkit[quanto]')."""
        import optimum.quanto as quanto

        return {"quanto": quanto}

    def _quantize(self, model: torch.nn.Module, names: list[str], smash_config: SmashConfigPrefixWrapper) -> Any:
        quanto = self.import_algorithm_packages()["quanto"]
        act = smash_config["act_bits"]
        quanto.quantize(model, weights=getattr(quanto, smash_config["weight_bits"]),
                        activations=None if act == "none" else getattr(quanto, act), include=names)
        for name in names:  # evaluation and serving run models under torch.inference_mode
            patch_forward(model.get_submodule(name), "_slimkit_quanto_mode", _outside_inference_mode)
        return quanto

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        exclude = tuple(smash_config["exclude"])
        targets = model_targets(model)
        chosen, reasons = choose(targets, self.target_kinds, exclude, smash_config["target_modules"],
                                 self.algorithm_name)
        names = [t.name for t in chosen]
        quanto = self._quantize(model, names, smash_config)
        source = None
        if smash_config["act_bits"] != "none" and smash_config["calibrate"]:
            batches, source = _batches(model, smash_config)
            with torch.no_grad(), quanto.Calibration():
                for batch in batches:
                    run_model(model, batch)
        quanto.freeze(model)
        # calibration leaves outputs that only feed non-quantized functions unquantized: replayed on load
        plain_outputs = [n for n in names if _output_unquantized(model.get_submodule(n))]
        smash_config.state.update(layers=names, calibration=source, plain_outputs=plain_outputs)
        record_coverage(smash_config.state, targets, names, exclude, reasons=reasons)
        return model

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Swap the same layers for quanto's; its own load hooks then rebuild the saved quantized weights."""
        names = replay_layers(model, state, "quanto")
        self._quantize(model, names, smash_config)
        for name in state.get("plain_outputs", []):
            model.get_submodule(name).disable_output_quantization()
        return model
