"""``nni.compression.quantization`` of NNI 3.0, as far as slimkit offers it: ``PtqQuantizer``.

NNI 3.0's ``QATQuantizer``, ``LsqQuantizer``, ``DoReFaQuantizer`` and ``BNNQuantizer`` share their names with
slimkit's engines (:mod:`slimkit.engines.quantization`), which take NNI 2.x's signatures; their NNI 3.0
signatures are not offered yet.
"""

from slimkit.faces.nni.v3.ptq import PtqQuantizer

__all__ = ["PtqQuantizer"]
