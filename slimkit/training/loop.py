"""The one training loop of slimkit: :func:`fit`.

Pruners that train (agp), the training-aware quantizers (qat, lsq, dorefa, bnn) and, later, distillation
all fine-tune through it; what they add (a pruner's mask update, a quantizer's epoch hook) goes in through
their optimizer (whose ``step`` they wrap) or the ``on_step`` / ``on_epoch`` callbacks.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from slimkit.data.batches import move_batch
from slimkit.errors import ConfigError, DataError
from slimkit.training.losses import BatchLoss, default_loss
from slimkit.training.optim import make_optimizer
from slimkit.training.result import EarlyStopping, FitResult
from slimkit.utils import model_device

#: ``on_step(step, loss)``: called after every optimizer step (``step`` counts from 1).
StepCallback = Callable[[int, float], Any]
#: ``on_epoch(epoch)``: called before the first batch of every epoch (``epoch`` counts from 0).
EpochCallback = Callable[[int], Any]
#: ``eval_fn(model) -> metric``: called in eval mode without gradients.
EvalFn = Callable[[nn.Module], float]


def _positive_int(name: str, value: Any, meaning: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(f"{name} must be an integer >= 1 ({meaning}) or None, got {value!r}.")


def _check(batches: Any, epochs: Any, steps: Any, grad_clip: Any, eval_fn: Any, eval_every: Any,
           patience: Any, num_threads: Any) -> None:
    if isinstance(batches, (torch.Tensor, str, bytes)) or not isinstance(batches, Iterable):
        raise DataError(
            f"fit needs an iterable of batches (a DataLoader or a list of batches), got a {type(batches).__name__}; "
            "wrap a single batch in a list: fit(model, [(inputs, targets)])."
        )
    _positive_int("epochs", epochs, "passes over the batches")
    _positive_int("steps", steps, "optimizer steps")
    _positive_int("eval_every", eval_every, "optimizer steps between two evaluations")
    _positive_int("num_threads", num_threads, "CPU threads while training")
    if grad_clip is not None and (isinstance(grad_clip, bool) or not isinstance(grad_clip, (int, float))
                                  or not grad_clip > 0):
        raise ConfigError(f"grad_clip must be a number > 0 (the max gradient norm) or None, got {grad_clip!r}.")
    if eval_fn is None and (eval_every is not None or patience is not None):
        raise ConfigError("eval_every and patience need an eval_fn (model -> metric) to evaluate; pass eval_fn=....")


def _planned_steps(batches: Any, epochs: int | None, steps: int | None) -> int | None:
    try:
        per_epoch = len(batches)
    except TypeError:
        per_epoch = None
    by_epochs = None if epochs is None or per_epoch is None else epochs * per_epoch
    if steps is None:
        return by_epochs
    return steps if by_epochs is None else min(steps, by_epochs)


@contextlib.contextmanager
def _session(model: nn.Module, device: torch.device, seed: int | None, num_threads: int | None) -> Iterator[None]:
    """Seeded RNG (forked, so the caller's random state is untouched), thread count and train mode, restored."""
    was_training, threads = model.training, torch.get_num_threads()
    with contextlib.ExitStack() as stack:
        if seed is not None:
            stack.enter_context(torch.random.fork_rng(devices=[device] if device.type == "cuda" else []))
            torch.manual_seed(int(seed))
        if num_threads is not None and device.type == "cpu":
            torch.set_num_threads(num_threads)
        try:
            model.train()
            yield
        finally:
            model.train(was_training)
            torch.set_num_threads(threads)


def _evaluate(model: nn.Module, eval_fn: EvalFn, step: int) -> float:
    model.eval()
    try:
        with torch.no_grad():
            value = eval_fn(model)
    finally:
        model.train()
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"eval_fn must return a number (the metric), got {type(value).__name__} after step {step}.")
    return float(value)


def _scalar(value: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        shape = f" of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else ""
        raise ConfigError(f"loss(model, batch) must return a scalar tensor, got a {type(value).__name__}{shape}.")
    return value


def fit(
    model: nn.Module,
    batches: Iterable[Any],
    *,
    loss: BatchLoss | None = None,
    optimizer: torch.optim.Optimizer | str = "adam",
    lr: float = 1e-3,
    epochs: int | None = None,
    steps: int | None = None,
    device: torch.device | str | None = None,
    seed: int | None = None,
    grad_clip: float | None = None,
    on_step: StepCallback | None = None,
    on_epoch: EpochCallback | None = None,
    eval_fn: EvalFn | None = None,
    eval_every: int | None = None,
    patience: int | None = None,
    mode: str = "max",
    min_delta: float = 0.0,
    restore_best: bool = False,
    num_threads: int | None = None,
    progress: bool = True,
    desc: str = "training",
    max_seconds: float | None = None,
) -> FitResult:
    """Train ``model`` in place on ``batches`` and return what happened (:class:`FitResult`).

    ``batches``: a DataLoader or any re-iterable of batches (read with :func:`slimkit.data.split_batch`;
    each is moved to ``device``). ``loss(model, batch)``: a batch loss (default: :func:`default_loss`,
    cross-entropy on the targets, else the model's ``.loss``). ``optimizer``: an optimizer over the model's
    parameters (e.g. one a pruner or quantizer wraps) or a name from :data:`OPTIMIZERS` built with ``lr``.

    Length: ``epochs`` passes and/or ``steps`` optimizer steps, whichever ends first; with neither, one
    epoch; with only ``steps``, the batches are cycled until that many steps ran. ``device``: moves the model
    there (default: where the model is). ``seed``: seeds torch's RNG (shuffling of a DataLoader without its
    own generator, dropout) on a forked random state. ``grad_clip``: max total gradient norm.
    ``on_epoch(epoch)`` runs before each epoch, ``on_step(step, loss)`` after each optimizer step.

    Evaluation: ``eval_fn(model) -> metric`` runs every ``eval_every`` steps (default: after each epoch) in
    eval mode without gradients; ``mode`` says whether higher (``"max"``) or lower (``"min"``) is better,
    ``patience`` stops after that many evaluations in a row without a gain above ``min_delta``, and
    ``restore_best`` loads the weights of the best evaluation at the end. ``num_threads``: CPU threads while
    training. ``max_seconds``: a wall-clock budget; training stops after the step that exceeds it (the result
    says ``stopped_early``). ``progress``: a tqdm bar (on terminals only; none when False). The model's
    train/eval mode, torch's thread count and (with ``seed``) the random state are restored afterwards.
    """
    _check(batches, epochs, steps, grad_clip, eval_fn, eval_every, patience, num_threads)
    if max_seconds is not None and (isinstance(max_seconds, bool) or not isinstance(max_seconds, (int, float))
                                    or not max_seconds > 0):
        raise ConfigError(f"max_seconds must be a number > 0 (a time budget in seconds) or None, got {max_seconds!r}.")
    deadline = None if max_seconds is None else time.perf_counter() + float(max_seconds)
    stopper = EarlyStopping(mode, patience, min_delta)
    if device is not None:
        model.to(device)
    target = model_device(model) if device is None else torch.device(device)
    if not isinstance(optimizer, torch.optim.Optimizer):
        optimizer = make_optimizer(optimizer, model.parameters(), lr=lr)
    loss_fn = loss or default_loss
    n_epochs = epochs if epochs is not None else (None if steps is not None else 1)
    result, best_state = FitResult(), None
    bar = tqdm(total=_planned_steps(batches, n_epochs, steps), desc=desc, leave=False, dynamic_ncols=True,
               disable=None if progress else True)

    def evaluate() -> bool:
        nonlocal best_state
        value = _evaluate(model, eval_fn, result.steps)  # type: ignore[arg-type]
        result.metrics.append((result.steps, value))
        if stopper.update(result.steps, value) and restore_best:
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        result.best_metric, result.best_step = stopper.best, stopper.best_step
        result.stopped_early = stopper.should_stop
        return stopper.should_stop

    try:
        with _session(model, target, seed, num_threads):
            while n_epochs is None or result.epochs < n_epochs:
                if on_epoch is not None:
                    on_epoch(result.epochs)
                result.epochs += 1
                seen, done = 0, False
                for batch in batches:
                    seen += 1
                    value = _scalar(loss_fn(model, move_batch(batch, target)))
                    optimizer.zero_grad(set_to_none=True)
                    value.backward()
                    if grad_clip is not None:
                        torch.nn.utils.clip_grad_norm_(
                            [p for g in optimizer.param_groups for p in g["params"]], float(grad_clip))
                    optimizer.step()
                    result.steps += 1
                    result.losses.append(float(value.detach()))
                    bar.update(1)
                    bar.set_postfix(loss=f"{result.losses[-1]:.4g}", refresh=False)
                    if on_step is not None:
                        on_step(result.steps, result.losses[-1])
                    if eval_fn is not None and eval_every is not None and result.steps % eval_every == 0:
                        done = evaluate()
                    if deadline is not None and time.perf_counter() >= deadline:
                        result.stopped_early = done = True
                    if done or (steps is not None and result.steps >= steps):
                        done = True
                        break
                if seen == 0:
                    where = "no batch" if result.steps == 0 else f"no batch in epoch {result.epochs}"
                    raise DataError(
                        f"The batches yielded {where} (after {result.steps} steps); give a non-empty, re-iterable "
                        "DataLoader or list (a generator is used up after one epoch)."
                    )
                if eval_fn is not None and eval_every is None and not result.stopped_early:
                    done = evaluate() or done
                if done:
                    break
    finally:
        bar.close()
    if best_state is not None:
        model.load_state_dict(best_state)
    return result
