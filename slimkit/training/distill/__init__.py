"""Distillation machinery usable by smash algorithms and the razor face: recorders, losses, connectors.

- recorders capture module outputs/inputs, method outputs and function outputs by name, only inside ``with``
  blocks (:class:`RecorderManager`);
- losses follow MMRazor's names and forward arguments, each implemented from its paper
  (:mod:`slimkit.training.distill.losses`);
- connectors match widths or turn features into what a loss compares (:mod:`~.connectors`);
- generators make images for data-free distillation (:class:`ZSKTGenerator`, :class:`DAFLGenerator`);
- :class:`ConfigurableDistiller` (and :class:`OFDDistiller`) ties them together; :class:`DistillObjective` is
  the batch loss that :func:`slimkit.training.fit` trains a student with, and :func:`frozen_teacher` keeps the
  teacher in eval mode.

Each loss, recorder, connector, generator and distiller is registered in the one registry's component table,
so ``slimkit.razor.build(dict(type="KLDivergence", tau=4))`` builds it.
"""

from slimkit.training.distill.connectors import (
    BYOTConnector,
    Conv1x1Connector,
    ConvModuleConnector,
    CRDConnector,
    FBKDStudentConnector,
    FBKDTeacherConnector,
    LinearConnector,
    MGDConnector,
    NormConnector,
    OFDTeacherConnector,
    Paraphraser,
    TorchFunctionalConnector,
    TorchNNConnector,
    Translator,
    connector_for,
)
from slimkit.training.distill.distiller import BYOTDistiller, ConfigurableDistiller, OFDDistiller, forward_arguments
from slimkit.training.distill.generators import DAFLGenerator, ZSKTGenerator
from slimkit.training.distill.input_recorders import FunctionInputsRecorder, MethodInputsRecorder, ParameterRecorder
from slimkit.training.distill.losses import (
    WSLD,
    ABLoss,
    ActivationLoss,
    AngleWiseRKD,
    ATLoss,
    ChannelWiseDivergence,
    CosineSimilarityLoss,
    CRDLoss,
    CrossEntropyLoss,
    DistanceWiseRKD,
    DistillLoss,
    DISTLoss,
    DKDLoss,
    FBKDLoss,
    FTLoss,
    InformationEntropyLoss,
    KDSoftCELoss,
    KLDivergence,
    L1Loss,
    L2Loss,
    MGDLoss,
    MSELoss,
    OFDLoss,
    OnehotLikeLoss,
    PKDLoss,
)
from slimkit.training.distill.objective import DistillObjective, frozen_teacher
from slimkit.training.distill.recorders import (
    BaseRecorder,
    FunctionOutputsRecorder,
    MethodOutputsRecorder,
    ModuleInputsRecorder,
    ModuleOutputsRecorder,
    RecorderManager,
)

__all__ = [
    "ABLoss", "ATLoss", "ActivationLoss", "AngleWiseRKD", "BYOTConnector", "BYOTDistiller", "BaseRecorder",
    "CRDConnector", "CRDLoss", "ChannelWiseDivergence", "ConfigurableDistiller", "Conv1x1Connector",
    "ConvModuleConnector", "CosineSimilarityLoss", "CrossEntropyLoss", "DAFLGenerator", "DISTLoss", "DKDLoss",
    "DistanceWiseRKD", "DistillLoss", "DistillObjective", "FBKDLoss", "FBKDStudentConnector", "FBKDTeacherConnector",
    "FTLoss", "FunctionInputsRecorder", "FunctionOutputsRecorder", "InformationEntropyLoss", "KDSoftCELoss",
    "KLDivergence", "L1Loss", "L2Loss", "LinearConnector", "MGDConnector", "MGDLoss", "MSELoss", "MethodInputsRecorder",
    "MethodOutputsRecorder", "ModuleInputsRecorder", "ModuleOutputsRecorder", "NormConnector", "OFDDistiller",
    "OFDLoss", "OFDTeacherConnector", "OnehotLikeLoss", "PKDLoss", "ParameterRecorder", "Paraphraser",
    "RecorderManager", "TorchFunctionalConnector", "TorchNNConnector", "Translator", "WSLD", "ZSKTGenerator",
    "connector_for", "forward_arguments", "frozen_teacher"
]
