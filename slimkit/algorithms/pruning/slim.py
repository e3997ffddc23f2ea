"""slim: Network Slimming, prune BatchNorm channels with the smallest scale, then shrink the layers for real."""

from __future__ import annotations

from torch import nn

from slimkit.algorithms.pruning._framework import FrameworkPruner
from slimkit.core.hyperparameters import choice
from slimkit.core.registry import register
from slimkit.engines.pruning import SlimEngine


@register
class Slim(FrameworkPruner):
    """Network Slimming: remove the channels whose BatchNorm scale (absolute gamma) is smallest over all layers.

    ``"default"`` selects the BatchNorm layers whose channels the speedup can remove; the conv producing each
    channel, the norm and the layers reading it are shrunk together. Works best on a model trained with an
    L1 penalty on the BatchNorm scales. ``scope="layer"`` prunes each BatchNorm to its own sparsity instead.
    """

    algorithm_name = "slim"
    references = {"Paper": "https://arxiv.org/abs/1708.06519",
                  "NNI": "https://nni.readthedocs.io/en/v2.0/Compression/Pruner.html#slim-pruner"}
    engine = SlimEngine
    engine_args = ("scope",)
    norms_decide = True
    model_layer_types = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)

    def extra_hyperparameters(self) -> list:
        """Global or per-layer ranking."""
        return [choice("scope", ["global", "layer"], "global", "global: rank channels over all selected BatchNorm "
                       "layers (the paper; one sparsity for all); layer: per layer.")]
