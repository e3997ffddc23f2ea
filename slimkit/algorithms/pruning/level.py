"""level: unstructured pruning through the NNI-shaped framework (zeros stay in the weights)."""

from __future__ import annotations

from typing import Any

from slimkit.algorithms.pruning._framework import FrameworkPruner, count_zero_fraction
from slimkit.core.contract import SaveFn, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import choice, integer
from slimkit.core.registry import register
from slimkit.engines.pruning import LevelEngine


@register
class Level(FrameworkPruner):
    """Unstructured pruning: zero the smallest-magnitude (or a seeded random set of) weights of each layer.

    NNI's LevelPruner. Layers are chosen with ``op_types``/``op_names``/``exclude`` (exact names or glob
    patterns) or an NNI ``config_list`` (per-layer sparsities). Shapes do not change, so dense kernels are not
    faster and the file is not smaller: pair it with a sparse runtime or a compressor, or use a structured
    pruner for speed. ``torch_unstructured`` is the retired name of this algorithm; its saves still load.
    """

    algorithm_name = "level"
    aliases = ("torch_unstructured",)
    renamed_hyperparameters = {"torch_unstructured": {"target_modules": "op_types", "pruning_method": "method"}}
    references = {"Paper": "https://arxiv.org/abs/1506.02626",
                  "NNI": "https://nni.readthedocs.io/en/v2.0/Compression/Pruner.html#level-pruner"}
    engine = LevelEngine
    engine_args = ("method", "seed")
    engine_defaults: dict[str, Any] = {}
    structured = False
    save_fn = SaveFn.KEEP

    def extra_hyperparameters(self) -> list:
        """Which weights go (magnitude or random) and the random seed."""
        return [
            choice("method", ["l1", "random"], "l1", "l1: smallest |weight| first; random: a seeded random subset (a "
                   "baseline)."),
            integer("seed", 0, 2**31 - 1, 0, "Seed of the random method."),
        ]

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        model = super()._apply(model, smash_config)
        smash_config.state["zero_fraction"] = count_zero_fraction(model, smash_config.state["pruned_layers"])
        return model
