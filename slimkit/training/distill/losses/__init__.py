"""Distillation losses, MMRazor's names and forward arguments, each implemented from its paper.

Logits: :class:`KLDivergence` (Hinton), :class:`KDSoftCELoss`, :class:`CrossEntropyLoss`, :class:`DKDLoss`,
:class:`DISTLoss`, :class:`WSLD`; relations: :class:`DistanceWiseRKD`, :class:`AngleWiseRKD`; features:
:class:`MSELoss`, :class:`L2Loss` (FitNets), :class:`L1Loss`, :class:`CosineSimilarityLoss`,
:class:`ChannelWiseDivergence` (CWD), :class:`ATLoss`, :class:`FTLoss`, :class:`ABLoss`, :class:`OFDLoss`,
:class:`FBKDLoss`, :class:`PKDLoss`, :class:`MGDLoss`, :class:`CRDLoss`; data-free generator objectives:
:class:`OnehotLikeLoss`, :class:`InformationEntropyLoss`, :class:`ActivationLoss`. Each is registered in the one
registry's component table (``build(dict(type=...))``).
"""

from slimkit.training.distill.losses.base import REDUCTIONS, DistillLoss
from slimkit.training.distill.losses.boundary import ABLoss
from slimkit.training.distill.losses.crd import CRDLoss
from slimkit.training.distill.losses.dafl import ActivationLoss, InformationEntropyLoss, OnehotLikeLoss
from slimkit.training.distill.losses.dist import DISTLoss
from slimkit.training.distill.losses.dkd import DKDLoss
from slimkit.training.distill.losses.fbkd import FBKDLoss
from slimkit.training.distill.losses.feature import CosineSimilarityLoss, L1Loss, L2Loss, MSELoss
from slimkit.training.distill.losses.ft import FTLoss
from slimkit.training.distill.losses.kl import KLDivergence
from slimkit.training.distill.losses.mgd import MGDLoss
from slimkit.training.distill.losses.ofd import OFDLoss
from slimkit.training.distill.losses.pkd import PKDLoss
from slimkit.training.distill.losses.rkd import AngleWiseRKD, DistanceWiseRKD
from slimkit.training.distill.losses.soft_ce import CrossEntropyLoss, KDSoftCELoss
from slimkit.training.distill.losses.spatial import ATLoss, ChannelWiseDivergence
from slimkit.training.distill.losses.wsld import WSLD

__all__ = [
    "ABLoss",
    "ATLoss",
    "ActivationLoss",
    "AngleWiseRKD",
    "CRDLoss",
    "ChannelWiseDivergence",
    "CosineSimilarityLoss",
    "CrossEntropyLoss",
    "DISTLoss",
    "DKDLoss",
    "DistanceWiseRKD",
    "DistillLoss",
    "FBKDLoss",
    "FTLoss",
    "InformationEntropyLoss",
    "KDSoftCELoss",
    "KLDivergence",
    "L1Loss",
    "L2Loss",
    "MGDLoss",
    "MSELoss",
    "OFDLoss",
    "OnehotLikeLoss",
    "PKDLoss",
    "REDUCTIONS",
    "WSLD",
]
