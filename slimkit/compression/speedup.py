"""``nni.compression.speedup`` (NNI 3.0) as ``slimkit.compression.speedup``.

``ModelSpeedup`` and ``auto_set_denpendency_group_ids`` (:mod:`slimkit.faces.nni.v3.speedup`).
"""

from slimkit.faces.nni.v3.speedup import *  # noqa: F403
from slimkit.faces.nni.v3.speedup import __all__  # noqa: F401
