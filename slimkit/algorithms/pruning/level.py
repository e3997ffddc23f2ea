"""level: unstructured magnitude pruning through the NNI-shaped framework (zeros stay in the weights)."""

from __future__ import annotations

from typing import Any

from slimkit.algorithms.pruning._framework import FrameworkPruner
from slimkit.compression.pruning import LevelPruner
from slimkit.core.contract import SaveFn, SmashConfigPrefixWrapper
from slimkit.core.registry import register


@register
class Level(FrameworkPruner):
    """Unstructured pruning: zero the smallest-magnitude weights of each selected layer (NNI's LevelPruner).

    Layers are chosen with ``op_types``/``op_names``/``exclude`` or an NNI ``config_list`` (per-layer
    sparsities). Shapes do not change, so dense kernels are not faster and the file is not smaller: pair it
    with a sparse runtime or a compressor, or use a structured pruner for speed.
    """

    algorithm_name = "level"
    references = {"Paper": "https://arxiv.org/abs/1506.02626",
                  "NNI": "https://nni.readthedocs.io/en/v2.0/Compression/Pruner.html#level-pruner"}
    engine = LevelPruner
    structured = False
    save_fn = SaveFn.KEEP

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        model = super()._apply(model, smash_config)
        layers = smash_config.state["pruned_layers"]
        weights = [model.get_submodule(n).weight for n in layers]
        total = sum(w.numel() for w in weights)
        smash_config.state["zero_fraction"] = sum(int((w == 0).sum()) for w in weights) / total if total else 0.0
        return model
