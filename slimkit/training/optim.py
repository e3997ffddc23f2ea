"""Optimizers by name, so configs and hyperparameters can say ``"adam"`` instead of building one."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from slimkit.errors import ConfigError, check_number, closest

#: Optimizer names :func:`make_optimizer` accepts.
OPTIMIZERS: tuple[str, ...] = ("adam", "adamw", "sgd")


def make_optimizer(
    name: str, params: Iterable[torch.nn.Parameter], *, lr: float = 1e-3, momentum: float = 0.9,
    weight_decay: float = 0.0,
) -> torch.optim.Optimizer:
    """``adam``, ``adamw`` or ``sgd`` (with ``momentum``) over ``params`` at learning rate ``lr``."""
    check_number("lr", lr, 0, open_low=True)
    params = [p for p in params if p.requires_grad]
    if not params:
        raise ConfigError("The model has no trainable parameter (none requires grad), so there is nothing to train.")
    key = name.lower() if isinstance(name, str) else name
    if key == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if key == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    if key == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    hint = closest(name, OPTIMIZERS) if isinstance(name, str) else ""
    raise ConfigError(
        f"Unknown optimizer {name!r}; allowed: {', '.join(OPTIMIZERS)}, or a torch.optim.Optimizer instance.{hint}"
    )
