"""The model of the quick-start scripts: a LeNet-style CNN for 28x28 grey digits, with NNI's usual layer names.

Every ReLU is a module of its own so a quantizer config can select them by type (``op_types: ["ReLU"]``).
"""

from __future__ import annotations

import torch
from torch import nn


class LeNet(nn.Module):
    """conv(5x5) -> pool -> conv(5x5) -> pool -> three Linear layers; returns log-probabilities."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.relu1, self.pool1 = nn.Conv2d(1, 8, 5), nn.ReLU(), nn.MaxPool2d(2)
        self.conv2, self.relu2, self.pool2 = nn.Conv2d(8, 16, 5), nn.ReLU(), nn.MaxPool2d(2)
        self.fc1, self.relu3 = nn.Linear(16 * 4 * 4, 96), nn.ReLU()
        self.fc2, self.relu4 = nn.Linear(96, 48), nn.ReLU()
        self.fc3 = nn.Linear(48, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool1(self.relu1(self.conv1(x)))
        x = self.pool2(self.relu2(self.conv2(x)))
        x = self.relu4(self.fc2(self.relu3(self.fc1(torch.flatten(x, 1)))))
        return torch.log_softmax(self.fc3(x), dim=1)
