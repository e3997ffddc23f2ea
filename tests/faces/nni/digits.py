"""Real data and small models for the NNI face tests: sklearn's 1,797 handwritten 8x8 digits, offline.

The helpers speak NNI 2.x's dialect: :func:`make_trainer` returns ``trainer(model, optimizer, criterion)``, the
one-epoch function every NNI 2.x pruner that trains takes, and :func:`accuracy` is the usual evaluator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

Batch = tuple[torch.Tensor, torch.Tensor]


def digit_batches(batch_size: int = 64, train_size: int | None = None) -> tuple[list[Batch], list[Batch]]:
    """``(train, test)`` batches of the 8x8 digits (one grey channel in [0, 1]), a fixed 75/25 split."""
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.long)
    x_train, x_test, y_train, y_test = train_test_split(images, labels, test_size=0.25, random_state=0)
    if train_size is not None:
        x_train, y_train = x_train[:train_size], y_train[:train_size]

    def chop(x: torch.Tensor, y: torch.Tensor) -> list[Batch]:
        return [(x[i:i + batch_size], y[i:i + batch_size]) for i in range(0, len(x), batch_size)]

    return chop(x_train, y_train), chop(x_test, y_test)


class DigitCNN(nn.Module):
    """Two 3x3 conv + BatchNorm + ReLU stages and a two-layer head, for 8x8 digits (10 classes).

    Each ReLU and pooling is its own module, so quantizer configs can name them (``relu1``, ``pool``).
    """

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.conv1, self.bn1, self.relu1 = nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU()
        self.conv2, self.bn2, self.relu2 = nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), \
            nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.fc1, self.relu3 = nn.Linear(2 * width * 16, 64), nn.ReLU()
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu1(self.bn1(self.conv1(x)))
        x = self.pool(self.relu2(self.bn2(self.conv2(x))))
        return self.fc2(self.relu3(self.fc1(torch.flatten(x, 1))))


class PlainCNN(nn.Module):
    """A smaller CNN without BatchNorm, with ReLU6 activations (NNI's quantization examples use ReLU6)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.relu1 = nn.Conv2d(1, 8, 3, padding=1), nn.ReLU6()
        self.conv2, self.relu2 = nn.Conv2d(8, 16, 3, padding=1), nn.ReLU6()
        self.pool = nn.MaxPool2d(2)
        self.fc1, self.relu3 = nn.Linear(16 * 16, 32), nn.ReLU6()
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.relu2(self.conv2(self.relu1(self.conv1(x)))))
        return self.fc2(self.relu3(self.fc1(torch.flatten(x, 1))))


def make_trainer(batches: Sequence[Batch], seen: list[int] | None = None) -> Callable[..., None]:
    """NNI 2.x's ``trainer(model, optimizer, criterion)``: one epoch over ``batches``.

    Appends 1 to ``seen`` per batch, so a test can count the batches a pruner had the trainer run.
    """

    def trainer(model: nn.Module, optimizer: torch.optim.Optimizer, criterion: Callable[..., torch.Tensor]) -> None:
        model.train()
        for data, target in batches:
            optimizer.zero_grad()
            criterion(model(data), target).backward()
            optimizer.step()
            if seen is not None:
                seen.append(1)

    return trainer


def train(model: nn.Module, batches: Sequence[Batch], epochs: int = 1, lr: float = 0.01) -> nn.Module:
    """``epochs`` of Adam with cross-entropy (pre-training and fine-tuning)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    trainer = make_trainer(batches)
    for _ in range(epochs):
        trainer(model, optimizer, nn.functional.cross_entropy)
    return model.eval()


@torch.no_grad()
def accuracy(model: nn.Module, batches: Sequence[Batch]) -> float:
    """Top-1 accuracy in [0, 1] (eval mode)."""
    model.eval()
    right = sum(int((model(x).argmax(1) == y).sum()) for x, y in batches)
    return right / sum(len(y) for _, y in batches)


def kept_channels(mask: torch.Tensor) -> list[int]:
    """The output channels (dim 0) a weight mask keeps."""
    return [int(i) for i in torch.nonzero(mask.reshape(mask.shape[0], -1).sum(dim=1)).flatten()]
