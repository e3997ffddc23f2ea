"""``nni.compression.distillation`` (NNI 3.0) as ``slimkit.compression.distillation``.

``DynamicLayerwiseDistiller`` and ``Adaptive1dLayerwiseDistiller`` (:mod:`slimkit.faces.nni.v3.distillation`).
"""

from slimkit.faces.nni.v3.distillation import *  # noqa: F403
from slimkit.faces.nni.v3.distillation import __all__  # noqa: F401
