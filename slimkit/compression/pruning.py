"""``nni.compression.pruning`` (NNI 3.0) as ``slimkit.compression.pruning``: NNI 3.0's pruners, 2.x's signatures too.

``from slimkit.compression.pruning import L1NormPruner, TaylorPruner, LinearPruner, AGPPruner, MovementPruner``
in place of ``from nni.compression.pruning import ...`` (:mod:`slimkit.faces.nni.v3.pruning`).
"""

from slimkit.faces.nni.v3.pruning import *  # noqa: F403
from slimkit.faces.nni.v3.pruning import __all__  # noqa: F401
