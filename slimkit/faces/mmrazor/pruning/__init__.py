"""MMRazor's channel pruning on slimkit's channel units: the mutators and the five algorithms.

>>> algo = build(dict(type="GroupFisherAlgorithm", architecture=net, interval=10,
...                   mutator=dict(type="GroupFisherChannelMutator", parse_cfg=dict(
...                       type="ChannelAnalyzer", demo_input=(1, 3, 32, 32)))))
>>> fit(algo, batches, loss=batch_loss, steps=200)
>>> small = algo.deploy()           # physically smaller; algo.kept_channels replays it on a fresh model
>>> static = build(dict(type="GroupFisherDeploySubModel", architecture=net, fix_subnet={unit: channels}))

The coupled channel groups come from slimkit's tracer (:mod:`slimkit.engines.pruning.channel_units`), the
algorithms' machinery from :mod:`slimkit.engines.pruning` (``group_fisher``, ``ite_prune``, ``dcff``, ``dmcp``,
``slimmable``); the SmashConfig names are ``group_fisher``, ``ite_prune``, ``dcff``, ``dmcp``,
``slimmable_network``.
"""

from slimkit.faces.mmrazor.pruning.base import PruningAlgorithm
from slimkit.faces.mmrazor.pruning.dcff import DCFF
from slimkit.faces.mmrazor.pruning.deploy import GroupFisherDeploySubModel, GroupFisherSubModel
from slimkit.faces.mmrazor.pruning.dmcp import DMCP
from slimkit.faces.mmrazor.pruning.group_fisher import GroupFisherAlgorithm
from slimkit.faces.mmrazor.pruning.ite_prune import ItePruneAlgorithm
from slimkit.faces.mmrazor.pruning.mutators import (
    ChannelMutator,
    DCFFChannelMutator,
    DMCPChannelMutator,
    GroupFisherChannelMutator,
    OneShotChannelMutator,
    SlimmableChannelMutator,
)
from slimkit.faces.mmrazor.pruning.slimmable import SlimmableNetwork

__all__ = [
    "ChannelMutator",
    "DCFF",
    "DCFFChannelMutator",
    "DMCP",
    "DMCPChannelMutator",
    "GroupFisherAlgorithm",
    "GroupFisherChannelMutator",
    "GroupFisherDeploySubModel",
    "GroupFisherSubModel",
    "ItePruneAlgorithm",
    "OneShotChannelMutator",
    "PruningAlgorithm",
    "SlimmableChannelMutator",
    "SlimmableNetwork",
]
