"""Shared fixtures of the training tests: the digits split as DataLoaders and a small MLP."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from slimkit.zoo.digits_cnn import digits_split


def make_mlp(seed: int = 0, dropout: float = 0.0) -> nn.Module:
    """A 64-32-10 MLP on flattened 8x8 digits, initialised from ``seed``."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Dropout(dropout), nn.Linear(32, 10))


@pytest.fixture(scope="session")
def digits() -> tuple[torch.Tensor, ...]:
    """(x_train, y_train, x_test, y_test) of the offline digits data (1347 / 450 images)."""
    return digits_split()


@pytest.fixture
def digit_loader(digits) -> DataLoader:
    """The train split in shuffled batches of 64 (own seeded generator)."""
    x, y, _, _ = digits
    return DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(0))


@pytest.fixture
def few_batches(digits) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Five fixed batches of 16 digits."""
    x, y, _, _ = digits
    return [(x[i * 16:(i + 1) * 16], y[i * 16:(i + 1) * 16]) for i in range(5)]
