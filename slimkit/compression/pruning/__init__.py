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

from slimkit.compression.pruning.activation_rank import (
    ActivationAPoZRankFilterPruner,
    ActivationAPoZRankFilterPrunerMasker,
    ActivationMeanRankFilterPruner,
    ActivationMeanRankFilterPrunerMasker,
)
from slimkit.compression.pruning.admm import ADMMEngine
from slimkit.compression.pruning.agp import AGPEngine, agp_sparsity
from slimkit.compression.pruning.allocation import AllocationPruner
from slimkit.compression.pruning.amc import AMCEngine
from slimkit.compression.pruning.attention import AttentionHeadMasker, AttentionHeadPruner, HeadLayout, find_head_layout
from slimkit.compression.pruning.auto_compress import AutoCompressEngine
from slimkit.compression.pruning.channel_macs import ChannelMacs
from slimkit.compression.pruning.compressor import Pruner
from slimkit.compression.pruning.config import PruningConfigError, resolve_config_list
from slimkit.compression.pruning.coupling import ChannelCoupling
from slimkit.compression.pruning.ddpg import DDPGAgent
from slimkit.compression.pruning.dependency import DependencyAwarePruner
from slimkit.compression.pruning.energy import ChannelEnergyPruner, ChannelEnergyPrunerMasker
from slimkit.compression.pruning.group import (
    ChannelGroupPlan,
    GroupFilterPruner,
    GroupL1FilterPruner,
    GroupL2FilterPruner,
)
from slimkit.compression.pruning.io import load_masks, load_state_dict_file, save_masks
from slimkit.compression.pruning.lottery_ticket import LotteryTicketEngine
from slimkit.compression.pruning.maskers import (
    FPGMPrunerMasker,
    L1FilterPrunerMasker,
    L2FilterPrunerMasker,
    LevelPrunerMasker,
    SlimPrunerMasker,
    StructuredWeightMasker,
    WeightMasker,
    num_to_prune,
)
from slimkit.compression.pruning.movement import MovementEngine
from slimkit.compression.pruning.net_adapt import NetAdaptPruner
from slimkit.compression.pruning.one_shot import FPGMEngine, L1FilterPruner, L2FilterPruner, LevelEngine, SlimEngine
from slimkit.compression.pruning.sensitivity import SensitivityPruner
from slimkit.compression.pruning.simulated_annealing import SimulatedAnnealingEngine
from slimkit.compression.pruning.taylor_fo import TaylorFOWeightFilterPruner, TaylorFOWeightFilterPrunerMasker
from slimkit.compression.pruning.utils import format_sensitivity_table, plot_sensitivity, sensitivity_analysis
from slimkit.compression.pruning.wrapper import PrunerModuleWrapper

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
