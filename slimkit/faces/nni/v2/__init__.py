"""NNI 2.x's pruning face: the class names, signatures and return values NNI 2.x scripts use.

``from slimkit.compression import L1NormPruner, ModelSpeedup, count_flops_params`` in place of
``nni.compression.pytorch...``; ``_, masks = pruner.compress()`` returns NNI 2.x's masks
``{layer: {"weight": mask, "bias": mask}}``, which ``ModelSpeedup(model, dummy_input, masks)`` accepts. Every
pruner is one of slimkit's engines (the same algorithms the SmashConfig and experiment faces run), imported
directly, behind NNI 2.x's constructor; ``SimulatedAnnealingPruner``, ``AutoCompressPruner`` and ``AMCPruner``
are NNI 2.x's schedulers (``compress()`` then ``get_best_result()``) over the search engines.
"""

from slimkit.faces.nni.v2.base import V2Pruner, show_pruned_weights, to_v1_masks, v2_masks
from slimkit.faces.nni.v2.basic import FPGMPruner, L1NormPruner, L2NormPruner, LevelPruner
from slimkit.faces.nni.v2.config import canonical_config_list
from slimkit.faces.nni.v2.iterative import PRUNER_DICT, AGPPruner, LinearPruner, LotteryTicketPruner
from slimkit.faces.nni.v2.search import AMCPruner, AutoCompressPruner, SimulatedAnnealingPruner
from slimkit.faces.nni.v2.speedup import ModelSpeedup
from slimkit.faces.nni.v2.tensorrt import ModelSpeedupTensorRT
from slimkit.faces.nni.v2.trace import rebuild, trace
from slimkit.faces.nni.v2.trained import (
    ActivationAPoZRankPruner,
    ActivationMeanRankPruner,
    SlimPruner,
    TaylorFOWeightPruner,
)
from slimkit.faces.nni.v2.training import ADMMPruner, MovementPruner

__all__ = [
    "ADMMPruner",
    "AGPPruner",
    "AMCPruner",
    "ActivationAPoZRankPruner",
    "ActivationMeanRankPruner",
    "AutoCompressPruner",
    "FPGMPruner",
    "L1NormPruner",
    "L2NormPruner",
    "LevelPruner",
    "LinearPruner",
    "LotteryTicketPruner",
    "ModelSpeedup",
    "ModelSpeedupTensorRT",
    "MovementPruner",
    "PRUNER_DICT",
    "SimulatedAnnealingPruner",
    "SlimPruner",
    "TaylorFOWeightPruner",
    "V2Pruner",
    "canonical_config_list",
    "rebuild",
    "show_pruned_weights",
    "to_v1_masks",
    "trace",
    "v2_masks",
]
