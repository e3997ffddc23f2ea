"""l1_filter: remove the output filters with the smallest L1 norm, then shrink the layers for real."""

from __future__ import annotations

from slimkit.algorithms.pruning._framework import FrameworkPruner
from slimkit.core.registry import register
from slimkit.engines.pruning import L1FilterPruner


@register
class L1Filter(FrameworkPruner):
    """Filter pruning by L1 norm: each selected Conv/Linear layer loses the output channels of smallest L1 norm.

    With ``speedup`` (default) the pruned channels are physically removed (coupled layers such as residual
    branches and gated MLPs are pruned together), so the model gets smaller and faster. ``dims`` names what is
    cut: MLP channels, whole attention heads (kv-head groups under GQA) and the hidden width of the residual
    stream, all three by default (a 50% BERT or ViT keeps about a third of its parameters, as Torch-Pruning);
    a Hugging Face model's config records the new sizes. The classifier feeding the output is left alone.
    """

    algorithm_name = "l1_filter"
    aliases = ("l1", "L1NormPruner")
    references = {"Paper": "https://arxiv.org/abs/1608.08710",
                  "NNI": "https://nni.readthedocs.io/en/v2.0/Compression/Pruner.html#l1filter-pruner"}
    engine = L1FilterPruner
    head_importance = "l1"
