"""Data, training epoch and evaluation shared by the quick-start scripts, as an NNI user would write them.

``datasets.MNIST`` comes from torchvision; the tests put slimkit's offline stand-in first on ``PYTHONPATH``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

_TRANSFORM = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
train_loader = DataLoader(datasets.MNIST("data", train=True, download=True, transform=_TRANSFORM), batch_size=32,
                          shuffle=True)
test_loader = DataLoader(datasets.MNIST("data", train=False, transform=_TRANSFORM), batch_size=256)


def trainer(model: nn.Module, optimizer: torch.optim.Optimizer, criterion: Callable[..., torch.Tensor]) -> None:
    """One epoch over the training set."""
    model.train()
    for images, labels in train_loader:
        optimizer.zero_grad()
        criterion(model(images), labels).backward()
        optimizer.step()


@torch.no_grad()
def evaluator(model: nn.Module) -> float:
    """Accuracy (%) on the test set."""
    model.eval()
    right = sum(int((model(images).argmax(1) == labels).sum()) for images, labels in test_loader)
    accuracy = 100.0 * right / len(test_loader.dataset)
    print(f"Accuracy: {accuracy:.1f}%")
    return accuracy
