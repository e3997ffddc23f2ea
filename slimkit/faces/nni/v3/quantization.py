"""``nni.compression.quantization`` of NNI 3.0: its six quantizers, each one class of the NNI face.

``QATQuantizer``, ``LsqQuantizer``, ``LsqPlusQuantizer``, ``DoReFaQuantizer`` and ``BNNQuantizer`` take NNI 3.0's
``(model, config_list, evaluator, ...)`` and NNI 2.x's ``(model, config_list, optimizer, ...)``
(:mod:`slimkit.faces.nni.v3.quantizers`); ``PtqQuantizer`` is post-training calibration through the evaluator
(:mod:`slimkit.faces.nni.v3.ptq`).
"""

from slimkit.faces.nni.v3.ptq import PtqQuantizer
from slimkit.faces.nni.v3.quantizers import (
    BNNQuantizer,
    DoReFaQuantizer,
    LsqPlusQuantizer,
    LsqQuantizer,
    QATQuantizer,
)

__all__ = ["BNNQuantizer", "DoReFaQuantizer", "LsqPlusQuantizer", "LsqQuantizer", "PtqQuantizer", "QATQuantizer"]
