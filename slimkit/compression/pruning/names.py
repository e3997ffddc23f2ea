"""Short algorithm names (as in NNI / Auptimizer experiment files) mapped to pruner classes."""

from __future__ import annotations

from slimkit.compression.pruning.agp import AGPPruner
from slimkit.compression.pruning.attention import AttentionHeadPruner
from slimkit.compression.pruning.compressor import Pruner
from slimkit.compression.pruning.config import PruningConfigError
from slimkit.compression.pruning.data_pruners import (
    ActivationAPoZRankFilterPruner,
    ActivationMeanRankFilterPruner,
    TaylorFOWeightFilterPruner,
)
from slimkit.compression.pruning.group import GroupL1FilterPruner, GroupL2FilterPruner
from slimkit.compression.pruning.one_shot import FPGMPruner, L1FilterPruner, L2FilterPruner, LevelPruner, SlimPruner
from slimkit.errors import closest

PRUNER_CLASSES: dict[str, type[Pruner]] = {
    "agp": AGPPruner,
    "apoz": ActivationAPoZRankFilterPruner,
    "attention_head": AttentionHeadPruner,
    "fpgm": FPGMPruner,
    "group_l1_filter": GroupL1FilterPruner,
    "group_l2_filter": GroupL2FilterPruner,
    "l1_filter": L1FilterPruner,
    "l2_filter": L2FilterPruner,
    "level": LevelPruner,
    "mean_activation": ActivationMeanRankFilterPruner,
    "slim": SlimPruner,
    "taylorfo": TaylorFOWeightFilterPruner,
}


def get_pruner_class(name: str) -> type[Pruner]:
    """The pruner class for a short name like ``"l1_filter"`` (error lists the valid names)."""
    if name not in PRUNER_CLASSES:
        raise PruningConfigError(
            f"Unknown pruner {name!r}.{closest(str(name), PRUNER_CLASSES)} "
            f"Valid names: {', '.join(PRUNER_CLASSES)}."
        )
    return PRUNER_CLASSES[name]
