"""Distillation machinery usable by smash algorithms and the razor face: recorders, losses, connectors.

- recorders capture module outputs/inputs, method outputs and function outputs by name, only inside ``with``
  blocks (:class:`RecorderManager`);
- losses follow MMRazor's names and forward arguments (:class:`KLDivergence`, :class:`MSELoss`,
  :class:`L2Loss`, :class:`ChannelWiseDivergence`, :class:`ATLoss`, :class:`CosineSimilarityLoss`);
- connectors (:class:`Conv1x1Connector`, :class:`LinearConnector`) match widths;
- :class:`ConfigurableDistiller` ties them together; :class:`DistillObjective` is the batch loss that
  :func:`slimkit.training.fit` trains a student with, and :func:`frozen_teacher` keeps the teacher in eval mode.

Each loss, recorder and connector is registered in the one registry's component table, so
``slimkit.razor.build(dict(type="KLDivergence", tau=4))`` builds it.
"""

from slimkit.training.distill.connectors import Conv1x1Connector, LinearConnector, connector_for
from slimkit.training.distill.distiller import ConfigurableDistiller, forward_arguments
from slimkit.training.distill.losses import (
    ATLoss,
    ChannelWiseDivergence,
    CosineSimilarityLoss,
    DistillLoss,
    KLDivergence,
    L2Loss,
    MSELoss,
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
    "ATLoss",
    "BaseRecorder",
    "ChannelWiseDivergence",
    "ConfigurableDistiller",
    "Conv1x1Connector",
    "CosineSimilarityLoss",
    "DistillLoss",
    "DistillObjective",
    "FunctionOutputsRecorder",
    "KLDivergence",
    "L2Loss",
    "LinearConnector",
    "MSELoss",
    "MethodOutputsRecorder",
    "ModuleInputsRecorder",
    "ModuleOutputsRecorder",
    "RecorderManager",
    "connector_for",
    "forward_arguments",
    "frozen_teacher",
]
