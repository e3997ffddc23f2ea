"""NNI-shaped compression: what NNI and Auptimizer scripts import as ``slimkit.compression``.

This module is a face
entry point over the engines in :mod:`slimkit.engines`: ``from slimkit.compression import L1NormPruner,
ModelSpeedup, count_flops_params, QAT_Quantizer`` are NNI's names (:mod:`slimkit.faces.nni`; NNI 2.x's class where
NNI 1.x and 2.x share a name, NNI 1.x's are in :mod:`slimkit.faces.nni.v1`) and ``create_compressor`` is
Auptimizer's ``aup.compression.create_compressor`` (``import slimkit as aup``). No engine imports it.
"""

from slimkit.faces.auptimizer import create_compressor
from slimkit.faces.nni import *  # noqa: F403
from slimkit.faces.nni import __all__ as _NNI

__all__ = sorted([*_NNI, "create_compressor"])  # noqa: PLE0605
