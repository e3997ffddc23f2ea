"""``nni.compression.quantization`` (NNI 3.0) as ``slimkit.compression.quantization``.

``QATQuantizer``, ``LsqQuantizer``, ``LsqPlusQuantizer``, ``DoReFaQuantizer``, ``BNNQuantizer`` and
``PtqQuantizer`` with NNI 3.0's ``(model, config_list, evaluator, ...)`` (:mod:`slimkit.faces.nni.v3.quantization`).
"""

from slimkit.faces.nni.v3.quantization import *  # noqa: F403
from slimkit.faces.nni.v3.quantization import __all__  # noqa: F401
