"""Connectors: small learned layers that map a student feature to the teacher's width before a loss.

``Conv1x1Connector`` maps ``[N, C_s, H, W]`` to ``[N, C_t, H, W]``; ``LinearConnector`` maps the last
dimension (``[..., D_s]`` to ``[..., D_t]``, hidden states and embeddings). They train with the student.
"""

from __future__ import annotations

import torch
from torch import nn

from slimkit.core.registry import register_component
from slimkit.errors import ConfigError, check_int


class Conv1x1Connector(nn.Module):
    """A 1x1 convolution (no bias) from ``in_channel`` student channels to ``out_channel`` teacher channels.

    ``norm=True`` adds a BatchNorm after it.
    """

    def __init__(self, in_channel: int, out_channel: int, norm: bool = False) -> None:
        super().__init__()
        self.in_channel = check_int("Conv1x1Connector: in_channel", in_channel)
        self.out_channel = check_int("Conv1x1Connector: out_channel", out_channel)
        self.conv = nn.Conv2d(in_channel, out_channel, 1, bias=False)
        self.norm = nn.BatchNorm2d(out_channel) if norm else nn.Identity()

    def forward(self, feature: torch.Tensor) -> torch.Tensor:
        """The student feature mapped to the teacher's channel count."""
        if feature.dim() != 4 or feature.shape[1] != self.in_channel:
            raise ConfigError(f"Conv1x1Connector({self.in_channel} -> {self.out_channel}) got a feature of shape "
                              f"{tuple(feature.shape)}; it needs [N, {self.in_channel}, H, W].")
        return self.norm(self.conv(feature))


class LinearConnector(nn.Module):
    """A Linear layer mapping the last dimension from ``in_features`` (student) to ``out_features`` (teacher)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.linear = nn.Linear(check_int("LinearConnector: in_features", in_features),
                                check_int("LinearConnector: out_features", out_features), bias=bool(bias))

    def forward(self, feature: torch.Tensor) -> torch.Tensor:
        """The student feature mapped to the teacher's width."""
        if feature.shape[-1] != self.linear.in_features:
            raise ConfigError(f"LinearConnector({self.linear.in_features} -> {self.linear.out_features}) got a "
                              f"feature of shape {tuple(feature.shape)}; its last dimension must be "
                              f"{self.linear.in_features}.")
        return self.linear(feature.to(self.linear.weight.dtype))


def connector_for(student_shape: tuple[int, ...], teacher_shape: tuple[int, ...]) -> nn.Module:
    """A connector that maps a student feature of ``student_shape`` to ``teacher_shape``.

    4-D features get a 1x1 conv on channels, others a Linear on the last dimension; ConfigError when no
    width change can make them match.
    """
    if len(student_shape) == 4 and len(teacher_shape) == 4 and student_shape[2:] == teacher_shape[2:]:
        return Conv1x1Connector(student_shape[1], teacher_shape[1])
    if len(student_shape) == len(teacher_shape) and student_shape[:-1] == teacher_shape[:-1]:
        return LinearConnector(student_shape[-1], teacher_shape[-1])
    raise ConfigError(f"No connector maps a student feature {tuple(student_shape)} to a teacher feature "
                      f"{tuple(teacher_shape)}: only the channel (4-D) or last dimension may differ.")


for _cls in (Conv1x1Connector, LinearConnector):
    register_component(_cls, "connector")
