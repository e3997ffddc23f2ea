"""torch_compile: compile the model's forward with torch.compile (Inductor by default)."""

from __future__ import annotations

from typing import Any

import torch
from ConfigSpace import CategoricalHyperparameter

from slimkit.core.contract import SaveFn, SlimkitCompiler, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean
from slimkit.core.registry import register


@register
class TorchCompile(SlimkitCompiler):
    """Compile the model with ``torch.compile``: graph capture plus fused, hardware-specific kernels.

    Compilation happens lazily on the first call (seconds to minutes); later calls run the compiled graph.
    The compiled form cannot be saved, so the model is saved before compilation and compiled again on load.
    """

    algorithm_name = "torch_compile"
    #: Pruna's names for close algorithms (errors point here)
    near_names = ("stable_fast", "x_fast")
    references = {"PyTorch": "https://pytorch.org/docs/stable/generated/torch.compile.html"}
    save_fn = SaveFn.SAVE_BEFORE_APPLY

    def get_hyperparameters(self) -> list:
        """Mode, backend and whole-graph capture."""
        return [
            CategoricalHyperparameter(
                "mode", ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"],
                default_value="default", meta={"desc": "torch.compile mode: trade compile time for speed."}),
            CategoricalHyperparameter(
                "backend", ["inductor", "aot_eager", "eager"], default_value="inductor",
                meta={"desc": "Compiler backend; 'inductor' generates fused kernels, the others are for debugging."}),
            Boolean("fullgraph", False, meta={"desc": "Fail instead of falling back to eager on graph breaks."}),
            Boolean("dynamic", False, meta={"desc": "Compile for dynamic shapes instead of specialising."}),
        ]

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        mode = smash_config["mode"]
        return torch.compile(
            model,
            mode=None if mode == "default" else mode,
            backend=smash_config["backend"],
            fullgraph=smash_config["fullgraph"],
            dynamic=smash_config["dynamic"],
        )
