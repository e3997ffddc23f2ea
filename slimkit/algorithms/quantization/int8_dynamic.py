"""int8_dynamic: fbgemm dynamic int8 quantization of Linear layers (weights int8, activations per token)."""

from __future__ import annotations

import warnings
from typing import Any

from ConfigSpace import OrdinalHyperparameter

from slimkit.algorithms.quantization._targets import TargetsMixin, model_targets, record_coverage, replay_layers
from slimkit.core.contract import SaveFn, SlimkitQuantizer, SmashConfigPrefixWrapper
from slimkit.core.coverage import refusal
from slimkit.core.hyperparameters import Boolean, ListHyperparameter
from slimkit.core.registry import register
from slimkit.core.weights import EXPERTS, select
from slimkit.engines.quantization.int8.dynamic import (
    KINDS,
    legacy_linear_names,
    quantize_named,
    quantize_targets,
)
from slimkit.engines.quantization.int8.experts import quantize_experts_int8, replay_int8_experts
from slimkit.engines.quantization.int8.per_token import per_token_activations
from slimkit.errors import ConfigError


@register
class Int8Dynamic(TargetsMixin, SlimkitQuantizer):
    """Dynamic int8 quantization of Linear layers with PyTorch's fbgemm kernels (CPU).

    Weights are stored as int8 (4x smaller than fp32); activations are quantized at run time with one scale per
    token (``activation_scales="per_token"``, as torchao's int8 dynamic does; an outlier token then coarsens no
    other token's codes) or one per call (``"per_tensor"``, torch.ao's own), so no calibration data is needed.
    Per-channel weight scales keep more accuracy than a single per-tensor scale;
    modules matching an ``exclude`` pattern stay in fp32. Quantizes ``nn.Linear`` and its subclasses that
    compute ``x W^T + b`` (Falcon's) and GPT-2's ``Conv1D``; MoE experts (transformers 5's 3-D expert weights)
    get int8 per-expert, per-channel weights and fbgemm int8 matmuls per expert with the same activation scales
    (saturation-safe weights on CPUs whose int8 kernel saturates). The result records its coverage.
    """

    algorithm_name = "int8_dynamic"
    near_names = ("llm_int8", "diffusers_int8")  # Pruna's names for close algorithms (errors point here)
    aliases = ("torch_dynamic",)  # Pruna's name: PyTorch dynamic int8 of Linear layers
    references = {
        "PyTorch": "https://pytorch.org/docs/stable/quantization.html#dynamic-quantization",
        "fbgemm": "https://github.com/pytorch/FBGEMM",
    }
    run_on_cpu = True
    run_on_cuda = False
    save_fn = SaveFn.REPLAY
    target_kinds = (*KINDS, EXPERTS)  # dense layers and MoE experts modules

    def get_hyperparameters(self) -> list:
        """Weight code type, per-channel scales and fp32 exclusions."""
        return [
            OrdinalHyperparameter("weight_bits", ["quint8", "qint8"], default_value="qint8",
                                  meta={"desc": "Type of the weight codes (Pruna's torch_dynamic name): qint8, signed "
                                                "8-bit; PyTorch's dynamic Linear takes no quint8 weights."}),
            Boolean("per_channel", True, meta={"desc": "One weight scale per output channel (more accurate) "
                                                       "instead of one per tensor."}),
            OrdinalHyperparameter("activation_scales", ["per_token", "per_tensor"], default_value="per_token",
                                  meta={"desc": "Activation quantization scales: one per token (input row; keeps "
                                                "LLMs with outlier tokens close to fp32) or one per call "
                                                "(torch.ao's 7-bit dynamic Linear)."}),
            ListHyperparameter("exclude", (), meta={"desc": "Module names kept in fp32: exact names or glob patterns, "
                                                            "e.g. ['*.output.dense', 'classifier']."}),
        ]

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        if smash_config["weight_bits"] != "qint8":
            raise ConfigError(f"int8_dynamic_weight_bits={smash_config['weight_bits']!r}: PyTorch's dynamic quantized "
                              "Linear stores its weights as qint8 only (quint8 is the type of its activations); set "
                              "weight_bits='qint8' (the default).")
        exclude = tuple(smash_config["exclude"])
        targets = model_targets(model)
        chosen = select(targets, self.target_kinds, exclude)
        if not chosen:  # only reachable with smash(..., experimental=True) or an exclude naming everything
            warnings.warn(refusal(targets, self.target_kinds, exclude, self.algorithm_name)
                          + " The model is left unchanged.", RuntimeWarning, stacklevel=3)
        names = quantize_targets(model, [t for t in chosen if t.kind != EXPERTS], smash_config["per_channel"])
        if smash_config["activation_scales"] == "per_token":
            per_token_activations(model, names)
        experts = quantize_experts_int8(model, [t.name for t in chosen if t.kind == EXPERTS],  # per expert
                                        per_token=smash_config["activation_scales"] == "per_token")
        smash_config.state.update(quantized_layers=len(names) + len(experts), layers=names, experts=experts,
                                  activation_scales=smash_config["activation_scales"])
        record_coverage(smash_config.state, targets, [*names, *experts], exclude)
        return model

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Rebuild the int8 module structure; the saved int8 weights and scales then load strictly."""
        if "layers" in state:
            names = replay_layers(model, state, self.algorithm_name)
        else:  # saved before layers were recorded: only exact nn.Linear layers were quantized then
            names = legacy_linear_names(model, tuple(smash_config["exclude"]))
        model = quantize_named(model, names, smash_config["per_channel"])
        if state.get("activation_scales") == "per_token":  # saves made before per-token scales were per tensor
            per_token_activations(model, names)
        return replay_int8_experts(model, state.get("experts", {}))
