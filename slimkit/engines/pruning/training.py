"""How the pruners that train (ADMM, AutoCompress, lottery ticket, movement) run an epoch.

Two ways, as in NNI and Auptimizer: the user's own ``trainer`` function, or ``dataloader=`` batches trained
through slimkit's one training loop (:func:`slimkit.training.fit`). A trainer is called with the keyword
arguments it declares among ``model``, ``optimizer``, ``criterion``, ``epoch`` and ``callback``
(``trainer(model, optimizer, criterion, epoch, callback)`` in NNI 1.x / Auptimizer, ``trainer(model,
optimizer, criterion)`` in NNI 2.x). When a pruner adds a term to the loss (ADMM's augmented Lagrangian), a
trainer that takes ``callback`` gets a callback that adds the term's gradient between ``backward()`` and
``step()``; otherwise the term is added to the ``criterion`` it receives.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from slimkit.engines.pruning.config import PruningConfigError
from slimkit.errors import check_number
from slimkit.training import criterion_loss, default_loss, fit

Trainer = Callable[..., Any]
#: ``penalty() -> scalar tensor``: an extra loss term (differentiable w.r.t. the model's weights)
Penalty = Callable[[], torch.Tensor]
_TRAINER_ARGS = ("model", "optimizer", "criterion", "epoch", "callback")


def check_trainer(who: str, trainer: Any, dataloader: Any) -> None:
    """A training pruner needs ``trainer`` (a callable) or ``dataloader`` (batches); say so when it has neither."""
    if trainer is not None and not callable(trainer):
        raise PruningConfigError(f"{who} trainer must be a function trainer(model, optimizer, criterion, epoch, "
                                 f"callback), got {type(trainer).__name__}.")
    if dataloader is not None and (isinstance(dataloader, (torch.Tensor, str, bytes))
                                   or not isinstance(dataloader, Iterable)):
        raise PruningConfigError(f"{who} dataloader must be an iterable of (inputs, targets) batches, got "
                                 f"{type(dataloader).__name__}.")
    if trainer is None and dataloader is None:
        raise PruningConfigError(
            f"{who} trains the model while it prunes: pass trainer=fn(model, optimizer, criterion, epoch, callback) "
            "(your own training epoch), or dataloader=<(inputs, targets) batches> to train with slimkit's loop."
        )


def check_positive_int(who: str, name: str, value: Any, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum``, else a clear error."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PruningConfigError(f"{who} {name} must be an int >= {minimum}, got {value!r}.")
    return value


def check_positive(who: str, name: str, value: Any, *, zero: bool = False) -> float:
    """``value`` as a float > 0 (>= 0 with ``zero``), else a clear error."""
    return check_number(f"{who} {name}", value, 0, open_low=not zero, error=PruningConfigError)


def check_fraction(who: str, name: str, value: Any, low: float = 0.0, high: float = 1.0, *,
                   closed_high: bool = False) -> float:
    """``value`` as a float in ``[low, high)`` (or ``[low, high]``), else a clear error."""
    return check_number(f"{who} {name}", value, low, high, open_high=not closed_high, error=PruningConfigError)


def _with_penalty(criterion: Callable[..., torch.Tensor], penalty: Penalty) -> Callable[..., torch.Tensor]:
    def loss(*args: Any, **kwargs: Any) -> torch.Tensor:
        return criterion(*args, **kwargs) + penalty()

    return loss


def run_epoch(
    model: nn.Module,
    epoch: int,
    *,
    trainer: Trainer | None,
    dataloader: Iterable[Any] | None,
    optimizer: torch.optim.Optimizer,
    criterion: Callable[..., torch.Tensor] | None = None,
    penalty: Penalty | None = None,
    penalty_grad: Callable[[], None] | None = None,
    seed: int | None = None,
) -> None:
    """Train ``model`` for one epoch with the user's ``trainer`` or on ``dataloader`` through :func:`fit`.

    ``penalty`` is an extra loss term; ``penalty_grad`` adds its gradient in place (what a trainer's
    ``callback`` runs between ``backward()`` and ``step()``). Give both or neither.
    """
    if trainer is not None:
        params = inspect.signature(trainer).parameters
        takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        crit = criterion if criterion is not None else nn.CrossEntropyLoss()
        wants_callback = takes_all or "callback" in params
        if penalty is not None and not wants_callback:
            crit = _with_penalty(crit, penalty)
        offered = {"model": model, "optimizer": optimizer, "criterion": crit, "epoch": epoch,
                   "callback": penalty_grad if penalty is not None else None}
        kwargs = {k: v for k, v in offered.items() if takes_all or k in params}
        missing = [n for n, p in params.items() if n not in kwargs and p.default is inspect.Parameter.empty
                   and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if missing:
            raise PruningConfigError(
                f"The trainer's arguments {missing} are unknown to the pruner; it passes {', '.join(_TRAINER_ARGS)} "
                "by name. Write trainer(model, optimizer, criterion, epoch, callback) (any subset of these)."
            )
        trainer(**kwargs)
        return
    base = criterion_loss(criterion) if criterion is not None else default_loss

    def loss(m: nn.Module, batch: Any) -> torch.Tensor:
        value = base(m, batch)
        return value + penalty() if penalty is not None else value

    fit(model, dataloader, loss=loss, optimizer=optimizer, epochs=1, seed=None if seed is None else seed + epoch,
        progress=False)
