"""Connectors: small learned (or fixed) layers between a recorded feature and a loss.

``Conv1x1Connector`` / ``LinearConnector`` / ``ConvModuleConnector`` match widths; the method-specific ones
turn features into what their loss compares: factor transfer (:class:`Paraphraser`, :class:`Translator`), OFD
(:class:`OFDTeacherConnector`), FBKD (:class:`FBKDStudentConnector`, :class:`FBKDTeacherConnector`), MGD
(:class:`MGDConnector`) and CRD (:class:`CRDConnector`). Student-side connectors train with the student.
"""

from slimkit.training.distill.connectors.basic import Conv1x1Connector, LinearConnector, connector_for
from slimkit.training.distill.connectors.convmodule import ConvModuleConnector
from slimkit.training.distill.connectors.crd import CRDConnector
from slimkit.training.distill.connectors.fbkd import FBKDStudentConnector, FBKDTeacherConnector, NonLocal2d
from slimkit.training.distill.connectors.ft import Paraphraser, Translator
from slimkit.training.distill.connectors.mgd import MGDConnector
from slimkit.training.distill.connectors.ofd import OFDTeacherConnector, bn_margin

__all__ = [
    "CRDConnector",
    "Conv1x1Connector",
    "ConvModuleConnector",
    "FBKDStudentConnector",
    "FBKDTeacherConnector",
    "LinearConnector",
    "MGDConnector",
    "NonLocal2d",
    "OFDTeacherConnector",
    "Paraphraser",
    "Translator",
    "bn_margin",
    "connector_for",
]
