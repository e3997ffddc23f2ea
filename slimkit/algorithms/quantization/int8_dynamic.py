"""int8_dynamic: fbgemm dynamic int8 quantization of Linear layers (weights int8, activations per batch)."""

from __future__ import annotations

from typing import Any

import torch

from slimkit.compression.quantization.int8.dynamic import linear_names, quantize_linears
from slimkit.core.contract import SaveFn, SlimkitQuantizer, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean, ListHyperparameter
from slimkit.core.registry import register


@register
class Int8Dynamic(SlimkitQuantizer):
    """Dynamic int8 quantization of Linear layers with PyTorch's fbgemm kernels (CPU).

    Weights are stored as int8 (4x smaller than fp32); activations are quantized per batch at run time, so no
    calibration data is needed. Per-channel weight scales keep more accuracy than a single per-tensor scale;
    modules matching an ``exclude`` pattern stay in fp32.
    """

    algorithm_name = "int8_dynamic"
    near_names = ("llm_int8", "diffusers_int8", "torchao")  # Pruna's names for close algorithms (errors point here)
    aliases = ("torch_dynamic",)  # Pruna's name: PyTorch dynamic int8 of Linear layers
    references = {
        "PyTorch": "https://pytorch.org/docs/stable/quantization.html#dynamic-quantization",
        "fbgemm": "https://github.com/pytorch/FBGEMM",
    }
    run_on_cpu = True
    run_on_cuda = False
    save_fn = SaveFn.REPLAY

    def get_hyperparameters(self) -> list:
        """Per-channel scales and fp32 exclusions."""
        return [
            Boolean("per_channel", True, meta={"desc": "One weight scale per output channel (more accurate) "
                                                       "instead of one per tensor."}),
            ListHyperparameter("exclude", (), meta={"desc": "Module names kept in fp32: exact names or glob patterns, "
                                                            "e.g. ['*.output.dense', 'classifier']."}),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """Needs at least one nn.Linear."""
        return isinstance(model, torch.nn.Module) and any(type(m) is torch.nn.Linear for m in model.modules())

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return "It quantizes nn.Linear layers and the model has none."

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        exclude = tuple(smash_config["exclude"])
        smash_config.state["quantized_layers"] = len(linear_names(model, exclude))
        return quantize_linears(model, smash_config["per_channel"], exclude)

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Rebuild the int8 module structure; the saved int8 weights and scales then load strictly."""
        return quantize_linears(model, smash_config["per_channel"], tuple(smash_config["exclude"]))
