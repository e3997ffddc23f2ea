"""Models the algorithm harness runs on: zoo entries plus a few local ones made to be rejected."""

from __future__ import annotations

from typing import Any

import torch

from slimkit import zoo


class ConvOnly(torch.nn.Module):
    """No nn.Linear at all: int8_dynamic must refuse it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class NoWeights(torch.nn.Module):
    """No parameters: pruners and half must refuse it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def _not_a_module(x: torch.Tensor) -> torch.Tensor:
    return x


LOCAL = {
    "conv_only": (ConvOnly, lambda: torch.randn(1, 3, 8, 8)),
    "no_weights": (NoWeights, lambda: torch.randn(2, 4)),
    "not_a_module": (lambda: _not_a_module, lambda: torch.randn(2, 4)),
}


def get_model(name: str) -> tuple[Any, Any, Any]:
    """Return (model, example_inputs, factory) for a harness model name; factory rebuilds the architecture."""
    if name in LOCAL:
        factory, inputs = LOCAL[name]
        torch.manual_seed(0)
        return factory(), inputs(), factory
    loaded = zoo.load(name)
    return loaded.model, loaded.example_inputs, None
