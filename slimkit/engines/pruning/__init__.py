"""NNI-shaped pruning: config_list, module wrappers holding masks, weight maskers and pruners.

Typical use::

    pruner = L1FilterPruner(model, [{"sparsity": 0.5, "op_types": ["default"]}])
    # coupled layers (residual adds, depthwise convs) drop the same channels, so the speedup removes them all:
    pruner = L1FilterPruner(model, config_list, dependency_aware=True, dummy_input=torch.randn(1, 3, 224, 224))
    pruner.compress()
    masks = pruner.get_masks()  # {layer name: {"weight_mask": ..., "bias_mask": ...}} for ModelSpeedup

Most engines carry NNI 1.x's class name (``L1FilterPruner``); the ten whose name NNI 2.x reused with another
signature are named as engines (``LevelEngine``, ``FPGMEngine``, ``SlimEngine``, ``AGPEngine``, ``ADMMEngine``,
``MovementEngine``, ``LotteryTicketEngine``, ``SimulatedAnnealingEngine``, ``AutoCompressEngine``,
``AMCEngine``), and NNI's names for them belong to the face (:mod:`slimkit.faces.nni`).
"""

from slimkit.engines.pruning.activation_rank import (
    ActivationAPoZRankFilterPruner,
    ActivationAPoZRankFilterPrunerMasker,
    ActivationMeanRankFilterPruner,
    ActivationMeanRankFilterPrunerMasker,
)
from slimkit.engines.pruning.admm import ADMMEngine
from slimkit.engines.pruning.agp import AGPEngine, agp_sparsity
from slimkit.engines.pruning.allocation import AllocationPruner
from slimkit.engines.pruning.amc import AMCEngine
from slimkit.engines.pruning.attention import AttentionHeadMasker, AttentionHeadPruner, HeadLayout, find_head_layout
from slimkit.engines.pruning.auto_compress import AutoCompressEngine
from slimkit.engines.pruning.channel_macs import ChannelMacs
from slimkit.engines.pruning.compressor import Pruner
from slimkit.engines.pruning.config import PruningConfigError, resolve_config_list
from slimkit.engines.pruning.coupling import ChannelCoupling
from slimkit.engines.pruning.ddpg import DDPGAgent
from slimkit.engines.pruning.dependency import DependencyAwarePruner
from slimkit.engines.pruning.energy import ChannelEnergyPruner, ChannelEnergyPrunerMasker
from slimkit.engines.pruning.group import (
    ChannelGroupPlan,
    GroupFilterPruner,
    GroupL1FilterPruner,
    GroupL2FilterPruner,
)
from slimkit.engines.pruning.io import load_masks, load_state_dict_file, save_masks
from slimkit.engines.pruning.lottery_ticket import LotteryTicketEngine
from slimkit.engines.pruning.maskers import (
    FPGMPrunerMasker,
    L1FilterPrunerMasker,
    L2FilterPrunerMasker,
    LevelPrunerMasker,
    SlimPrunerMasker,
    StructuredWeightMasker,
    WeightMasker,
    num_to_prune,
)
from slimkit.engines.pruning.movement import MovementEngine
from slimkit.engines.pruning.net_adapt import NetAdaptPruner
from slimkit.engines.pruning.one_shot import FPGMEngine, L1FilterPruner, L2FilterPruner, LevelEngine, SlimEngine
from slimkit.engines.pruning.sensitivity import SensitivityPruner
from slimkit.engines.pruning.simulated_annealing import SimulatedAnnealingEngine
from slimkit.engines.pruning.taylor_fo import TaylorFOWeightFilterPruner, TaylorFOWeightFilterPrunerMasker
from slimkit.engines.pruning.utils import format_sensitivity_table, plot_sensitivity, sensitivity_analysis
from slimkit.engines.pruning.wrapper import PrunerModuleWrapper

__all__ = [
    "ADMMEngine",
    "AGPEngine",
    "AMCEngine",
    "ActivationAPoZRankFilterPruner",
    "ActivationAPoZRankFilterPrunerMasker",
    "ActivationMeanRankFilterPruner",
    "ActivationMeanRankFilterPrunerMasker",
    "AllocationPruner",
    "AttentionHeadMasker",
    "AttentionHeadPruner",
    "AutoCompressEngine",
    "ChannelCoupling",
    "ChannelEnergyPruner",
    "ChannelEnergyPrunerMasker",
    "ChannelGroupPlan",
    "ChannelMacs",
    "DDPGAgent",
    "DependencyAwarePruner",
    "FPGMEngine",
    "FPGMPrunerMasker",
    "GroupFilterPruner",
    "GroupL1FilterPruner",
    "GroupL2FilterPruner",
    "HeadLayout",
    "L1FilterPruner",
    "L1FilterPrunerMasker",
    "L2FilterPruner",
    "L2FilterPrunerMasker",
    "LevelEngine",
    "LevelPrunerMasker",
    "LotteryTicketEngine",
    "MovementEngine",
    "NetAdaptPruner",
    "Pruner",
    "PrunerModuleWrapper",
    "PruningConfigError",
    "SensitivityPruner",
    "SimulatedAnnealingEngine",
    "SlimEngine",
    "SlimPrunerMasker",
    "StructuredWeightMasker",
    "TaylorFOWeightFilterPruner",
    "TaylorFOWeightFilterPrunerMasker",
    "WeightMasker",
    "agp_sparsity",
    "find_head_layout",
    "format_sensitivity_table",
    "load_masks",
    "load_state_dict_file",
    "num_to_prune",
    "plot_sensitivity",
    "resolve_config_list",
    "save_masks",
    "sensitivity_analysis",
]
