"""A method and a function for the input recorders to watch (they patch them where they are defined)."""

from __future__ import annotations

import torch


class Toy:
    def combine(self, x: int, y: int = 0) -> int:
        return x + y


def scale(tensor: torch.Tensor, factor: float) -> torch.Tensor:
    return tensor * factor


def run_scale(tensor: torch.Tensor, factor: float) -> torch.Tensor:
    """Calls :func:`scale` through the module, so a recorder patching it sees the call."""
    return scale(tensor, factor=factor)
