"""OFDTeacherConnector: the teacher's pre-ReLU feature clipped from below at its batch norm's margin (OFD)."""

from __future__ import annotations

import math

import torch
from torch import nn

from slimkit.core.registry import register_component
from slimkit.errors import ConfigError


def bn_margin(bn: nn.Module) -> torch.Tensor:
    """Per channel, the expected value of the pre-ReLU response given that it is negative (Heo et al. 2019).

    The batch norm makes each channel roughly Gaussian with mean ``beta`` and std ``|gamma|``; the margin is
    ``E[x | x < 0] = beta - |gamma| * pdf(beta/|gamma|) / cdf(-beta/|gamma|)`` (``-3 |gamma|`` when that tail
    holds under 0.1% of the mass). Shape ``[1, C, 1, 1]``.
    """
    if not isinstance(bn, nn.modules.batchnorm._BatchNorm) or bn.weight is None:
        raise ConfigError(f"OFD margins come from an affine BatchNorm layer, got {type(bn).__name__}; record the "
                          "teacher's batch norm before its ReLU.")
    values = []
    for gamma, beta in zip(bn.weight.detach().abs().tolist(), bn.bias.detach().tolist(), strict=True):
        s = max(gamma, 1e-12)
        cdf = 0.5 * (1 + math.erf(-beta / s / math.sqrt(2)))
        if cdf > 1e-3:
            values.append(beta - s * math.exp(-((beta / s) ** 2) / 2) / math.sqrt(2 * math.pi) / cdf)
        else:
            values.append(-3 * s)
    return torch.tensor(values, dtype=torch.float32).reshape(1, -1, 1, 1)


class OFDTeacherConnector(nn.Module):
    """``max(feature, margin)`` on the (detached) teacher feature; the margin is set by :meth:`init_margin`.

    :class:`~slimkit.razor.OverhaulFeatureDistillation` sets it from the teacher's batch norm that the
    recorder reads (:func:`bn_margin`).
    """

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("margin", torch.empty(0))

    def init_margin(self, margin: torch.Tensor) -> None:
        """Set the per-channel margin (``[1, C, 1, 1]``)."""
        self.margin = margin.detach().clone().to(self.margin.device)

    def forward(self, feature: torch.Tensor) -> torch.Tensor:
        """The clipped teacher feature."""
        if self.margin.numel() == 0:
            raise ConfigError("OFDTeacherConnector has no margin: use it inside OverhaulFeatureDistillation (which "
                              "sets it from the teacher's batch norm) or call init_margin(bn_margin(bn)).")
        return torch.maximum(feature.detach(), self.margin.to(feature.dtype))


register_component(OFDTeacherConnector, "connector")
