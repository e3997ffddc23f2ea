"""``mlp``: a seeded three-layer perceptron (Linear-ReLU-Linear-ReLU-Linear) for fast unit tests."""

from __future__ import annotations

import torch
from torch import nn

from slimkit.zoo._common import seeded
from slimkit.zoo.registry import ZooModel

TASK = "classification"
ARCH_DEFAULTS = {"in_features": 32, "hidden_features": 64, "out_features": 10, "seed": 0}
INPUT_DEFAULTS = {"batch_size": 4}


class MLP(nn.Module):
    """Three Linear layers with ReLU in between; named layers (fc1, fc2, fc3) for pruning configs."""

    def __init__(self, in_features: int = 32, hidden_features: int = 64, out_features: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.relu1 = nn.ReLU()
        self.fc2 = nn.Linear(hidden_features, hidden_features)
        self.relu2 = nn.ReLU()
        self.fc3 = nn.Linear(hidden_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``[N, in_features]`` to logits ``[N, out_features]``."""
        return self.fc3(self.relu2(self.fc2(self.relu1(self.fc1(x)))))


def build(in_features: int, hidden_features: int, out_features: int, seed: int) -> nn.Module:
    """Build the MLP with weights drawn from ``seed``."""
    with seeded(seed):
        return MLP(in_features, hidden_features, out_features)


def load(in_features: int, hidden_features: int, out_features: int, seed: int, batch_size: int) -> ZooModel:
    """Build the seeded MLP and a seeded ``[batch_size, in_features]`` input."""
    model = build(in_features, hidden_features, out_features, seed)
    x = torch.randn(batch_size, in_features, generator=torch.Generator().manual_seed(seed + 1))
    return ZooModel(model, x, "mlp", meta={"num_classes": out_features})
