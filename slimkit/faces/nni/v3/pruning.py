"""``nni.compression.pruning`` of NNI 3.0: its pruner names, each one class of the NNI face.

``LevelPruner``, ``L1NormPruner``, ``L2NormPruner``, ``FPGMPruner``, ``SlimPruner``, ``MovementPruner``,
``LinearPruner`` and ``AGPPruner`` are the classes NNI 2.x's scripts use too (:mod:`slimkit.faces.nni.v2`):
each takes both signatures. ``TaylorPruner`` is new in NNI 3.0 (:mod:`slimkit.faces.nni.v3.taylor`).
"""

from slimkit.faces.nni.v2.basic import FPGMPruner, L1NormPruner, L2NormPruner, LevelPruner
from slimkit.faces.nni.v2.iterative import AGPPruner, LinearPruner
from slimkit.faces.nni.v2.trained import SlimPruner
from slimkit.faces.nni.v2.training import MovementPruner
from slimkit.faces.nni.v3.taylor import TaylorPruner

__all__ = ["AGPPruner", "FPGMPruner", "L1NormPruner", "L2NormPruner", "LevelPruner", "LinearPruner", "MovementPruner",
           "SlimPruner", "TaylorPruner"]
