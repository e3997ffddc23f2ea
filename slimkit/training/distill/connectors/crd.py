"""CRDConnector: a linear embedding, L2-normalised, for contrastive representation distillation."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from slimkit.core.registry import register_component


class CRDConnector(nn.Module):
    """Flatten, ``Linear(dim_in, dim_out)``, L2-normalise (the embedding a CRDLoss memory bank stores)."""

    def __init__(self, dim_in: int = 1024, dim_out: int = 128) -> None:
        super().__init__()
        self.linear = nn.Linear(int(dim_in), int(dim_out))

    def forward(self, feature: torch.Tensor) -> torch.Tensor:
        """The normalised embedding ``[N, dim_out]``."""
        return F.normalize(self.linear(feature.flatten(1)), dim=1)


register_component(CRDConnector, "connector")
