"""Connectors: small learned (or fixed) layers between a recorded feature and a loss.

``Conv1x1Connector`` / ``LinearConnector`` / ``ConvModuleConnector`` match widths; the method-specific ones
turn features into what their loss compares: factor transfer (:class:`Paraphraser`, :class:`Translator`), OFD
(:class:`OFDTeacherConnector`), FBKD (:class:`FBKDStudentConnector`, :class:`FBKDTeacherConnector`), MGD
(:class:`MGDConnector`), CRD (:class:`CRDConnector`) and BYOT (:class:`BYOTConnector`); one-op
connectors (:class:`TorchFunctionalConnector`, :class:`TorchNNConnector`, :class:`NormConnector`) pool or
normalise. Student-side connectors train with the student.
"""

from slimkit.training.distill.connectors.basic import Conv1x1Connector, LinearConnector, connector_for
from slimkit.training.distill.connectors.byot import BYOTConnector
from slimkit.training.distill.connectors.convmodule import ConvModuleConnector
from slimkit.training.distill.connectors.crd import CRDConnector
from slimkit.training.distill.connectors.fbkd import FBKDStudentConnector, FBKDTeacherConnector, NonLocal2d
from slimkit.training.distill.connectors.ft import Paraphraser, Translator
from slimkit.training.distill.connectors.mgd import MGDConnector
from slimkit.training.distill.connectors.ofd import OFDTeacherConnector, bn_margin
from slimkit.training.distill.connectors.torch_ops import NormConnector, TorchFunctionalConnector, TorchNNConnector

__all__ = [
    "BYOTConnector",
    "CRDConnector",
    "Conv1x1Connector",
    "ConvModuleConnector",
    "FBKDStudentConnector",
    "FBKDTeacherConnector",
    "LinearConnector",
    "MGDConnector",
    "NonLocal2d",
    "NormConnector",
    "OFDTeacherConnector",
    "Paraphraser",
    "TorchFunctionalConnector",
    "TorchNNConnector",
    "Translator",
    "bn_margin",
    "connector_for",
]
