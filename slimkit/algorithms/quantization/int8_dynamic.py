"""int8_dynamic: fbgemm dynamic int8 quantization of Linear layers (weights int8, activations per batch)."""

from __future__ import annotations

import warnings
from typing import Any

from slimkit.algorithms.quantization._targets import TargetsMixin, model_targets, record_coverage
from slimkit.compression.quantization.int8.dynamic import (
    KINDS,
    legacy_linear_names,
    quantize_named,
    quantize_targets,
)
from slimkit.core.contract import SaveFn, SlimkitQuantizer, SmashConfigPrefixWrapper
from slimkit.core.coverage import refusal
from slimkit.core.hyperparameters import Boolean, ListHyperparameter
from slimkit.core.registry import register
from slimkit.core.weights import select
from slimkit.errors import SaveLoadError


@register
class Int8Dynamic(TargetsMixin, SlimkitQuantizer):
    """Dynamic int8 quantization of Linear layers with PyTorch's fbgemm kernels (CPU).

    Weights are stored as int8 (4x smaller than fp32); activations are quantized per batch at run time, so no
    calibration data is needed. Per-channel weight scales keep more accuracy than a single per-tensor scale;
    modules matching an ``exclude`` pattern stay in fp32. Quantizes ``nn.Linear`` and its subclasses that
    compute ``x W^T + b`` (Falcon's) and GPT-2's ``Conv1D``; the result records its coverage.
    """

    algorithm_name = "int8_dynamic"
    references = {
        "PyTorch": "https://pytorch.org/docs/stable/quantization.html#dynamic-quantization",
        "fbgemm": "https://github.com/pytorch/FBGEMM",
    }
    run_on_cpu = True
    run_on_cuda = False
    save_fn = SaveFn.REPLAY
    target_kinds = KINDS

    def get_hyperparameters(self) -> list:
        """Per-channel scales and fp32 exclusions."""
        return [
            Boolean("per_channel", True, meta={"desc": "One weight scale per output channel (more accurate) "
                                                       "instead of one per tensor."}),
            ListHyperparameter("exclude", (), meta={"desc": "Module names kept in fp32: exact names or glob patterns, "
                                                            "e.g. ['*.output.dense', 'classifier']."}),
        ]

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        exclude = tuple(smash_config["exclude"])
        targets = model_targets(model)
        chosen = select(targets, KINDS, exclude)
        if not chosen:  # only reachable with smash(..., experimental=True) or an exclude naming everything
            warnings.warn(refusal(targets, KINDS, exclude, self.algorithm_name) + " The model is left unchanged.",
                          RuntimeWarning, stacklevel=3)
        names = quantize_targets(model, chosen, smash_config["per_channel"])
        smash_config.state.update(quantized_layers=len(names), layers=names)
        record_coverage(smash_config.state, targets, names, exclude)
        return model

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Rebuild the int8 module structure; the saved int8 weights and scales then load strictly."""
        names = state.get("layers")
        if names is None:  # saved before layers were recorded: only exact nn.Linear layers were quantized then
            names = legacy_linear_names(model, tuple(smash_config["exclude"]))
        present = {name for name, _ in model.named_modules()}
        missing = [n for n in names if n not in present]
        if missing:
            raise SaveLoadError(f"The weights of the saved model do not fit the rebuilt architecture: int8_dynamic "
                                f"quantized {missing[:3]}, which it does not have. Pass model= the architecture that "
                                "was smashed.")
        return quantize_named(model, names, smash_config["per_channel"])
