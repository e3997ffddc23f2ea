"""NNI 3.0's evaluators: the user's own training loop, which a pruner steers by patching its loss and optimizer.

``TorchEvaluator(training_func, optimizers, training_step, lr_schedulers=None, dummy_input=None,
evaluating_func=None)`` wraps a plain PyTorch loop: ``training_func(model, optimizers, training_step,
lr_schedulers, max_steps, max_epochs)`` trains, calling ``loss = training_step(batch, model)`` and
``optimizer.step()``. As in NNI 3.0, a pruner adds to the loss (:meth:`Evaluator.patch_loss`: Slim's L1 penalty)
and runs tasks around each ``optimizer.step()`` (:meth:`Evaluator.patch_optimizer_step`: Taylor's gradient
statistics, movement scores). slimkit's engines hook an optimizer's ``step``; :class:`OptimizerRelay` is the
optimizer they hook, and :meth:`Evaluator.relay_optimizer_step` runs the real step through it.

Optimizers may be ``slimkit.trace(torch.optim.SGD)(...)`` (NNI's ``nni.trace``) or plain: slimkit's wrappers keep
each layer's parameters, so the user's optimizer keeps training the wrapped model.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.errors import ConfigError

__all__ = ["Evaluator", "OptimizerRelay", "TorchEvaluator", "add_missing_params", "patch_output_loss",
           "undo_patches"]

LossPatch = Callable[[torch.Tensor, Any], torch.Tensor]
StepWrapper = Callable[[Callable[..., Any]], Callable[..., Any]]


def patch_output_loss(out: Any, batch: Any, patches: Sequence[LossPatch]) -> Any:
    """Apply ``patches`` to the loss in a training step's output (a tensor, ``(loss, ...)`` or ``{"loss": ...}``)."""
    if not patches:
        return out
    def apply(loss: torch.Tensor) -> torch.Tensor:
        for patch in patches:
            loss = patch(loss, batch)
        return loss
    if isinstance(out, torch.Tensor):
        return apply(out)
    if isinstance(out, MutableMapping) and isinstance(out.get("loss"), torch.Tensor):
        out["loss"] = apply(out["loss"])
        return out
    if isinstance(out, Sequence) and not isinstance(out, str) and out and isinstance(out[0], torch.Tensor):
        return (apply(out[0]), *out[1:])
    raise ConfigError(f"training_step must return the loss (a tensor, a tuple starting with it or a dict with "
                      f"'loss'), got {type(out).__name__}.")


class OptimizerRelay:
    """The optimizer a slimkit engine hooks: its ``step()`` is the real optimizer's step while the evaluator trains.

    An engine given this relay patches ``relay.step`` (its tasks before and after); the evaluator, through
    :meth:`Evaluator.relay_optimizer_step`, sends each real ``optimizer.step()`` through it.
    """

    def __init__(self) -> None:
        self._inner: Callable[..., Any] | None = None
        #: parameters an engine asked the optimizer to learn (LSQ's step sizes): the evaluator adds them
        self.added_params: list[nn.Parameter] = []

    def step(self, *args: Any, **kwargs: Any) -> Any:
        """Run the real step the evaluator is taking (nothing outside training)."""
        return None if self._inner is None else self._inner(*args, **kwargs)

    def through(self, real_step: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Take ``real_step`` through :meth:`step` (and whatever an engine patched around it)."""
        self._inner = real_step
        try:
            return self.step(*args, **kwargs)
        finally:
            self._inner = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Nothing: the user's loop zeroes the gradients of its own optimizer."""

    def add_param_group(self, group: Mapping[str, Any]) -> None:
        """Keep ``group["params"]`` for the real optimizer (:meth:`Evaluator.add_params` adds them there)."""
        self.added_params.extend(group["params"])


def undo_patches(owner: Any, own: Mapping[str, Any], optimizers: Sequence[tuple[Any, Any, bool]]) -> None:
    """Put back what an evaluator patched for one run: ``owner``'s methods and the optimizers' ``step``.

    ``own`` maps each patched method name to the instance attribute it had before (``None``: the class's);
    ``optimizers`` holds ``(optimizer, original step, whether step was an instance attribute)``.
    """
    for name, value in own.items():
        if value is None:
            vars(owner).pop(name, None)
        else:
            setattr(owner, name, value)
    for optimizer, step, had_own in optimizers:
        if had_own:
            optimizer.step = step
        else:
            vars(optimizer).pop("step", None)


def add_missing_params(optimizer: torch.optim.Optimizer, params: Sequence[nn.Parameter]) -> None:
    """Add the ``params`` ``optimizer`` does not train yet as one group without weight decay."""
    known = {id(p) for group in optimizer.param_groups for p in group["params"]}
    missing = list({id(p): p for p in params if id(p) not in known}.values())
    if missing:
        optimizer.add_param_group({"params": missing, "weight_decay": 0.0})


class Evaluator:
    """What every NNI 3.0 evaluator offers a pruner: bind a model, patch its loss and optimizer step, train it.

    ``steps_taken`` counts the optimizer steps the evaluator's training ran since the model was bound.
    """

    def __init__(self, dummy_input: Any = None) -> None:
        self.dummy_input = dummy_input
        self.model: nn.Module | None = None
        self.steps_taken = 0
        self._loss_patches: list[LossPatch] = []
        self._step_wrappers: list[StepWrapper] = []
        self._extra_params: list[nn.Parameter] = []

    def bind_model(self, model: nn.Module, param_names_map: Mapping[str, str] | None = None) -> None:
        """Train ``model`` from now on (slimkit's wrappers keep parameter names, so ``param_names_map`` is unused)."""
        if not isinstance(model, nn.Module):
            raise ConfigError(f"{type(self).__name__}.bind_model needs a torch.nn.Module, got {type(model).__name__}.")
        self.model, self.steps_taken = model, 0

    def unbind_model(self) -> None:
        """Forget the model and every patch."""
        self.revert_loss()
        self.revert_optimizer_step()
        self._extra_params.clear()
        self.model = None

    @contextlib.contextmanager
    def bound(self, model: nn.Module) -> Iterator[Evaluator]:
        """``with evaluator.bound(model):`` binds ``model`` for the block, then unbinds it (every patch dropped)."""
        self.bind_model(model)
        try:
            yield self
        finally:
            self.unbind_model()

    def train_bound(self, model: nn.Module, max_steps: int | None = None, max_epochs: int | None = None,
                    relay: OptimizerRelay | None = None, loss_patch: LossPatch | None = None) -> None:
        """Train ``model`` for that long (steps sent through ``relay``, the loss through ``loss_patch``); unbind."""
        with self.bound(model):
            if relay is not None:
                self.relay_optimizer_step(relay)
            if loss_patch is not None:
                self.patch_loss(loss_patch)
            self.train(max_steps=max_steps, max_epochs=max_epochs)

    def patch_loss(self, patch: LossPatch) -> None:
        """From now on the training loss is ``patch(loss, batch)`` (patches apply in the order given)."""
        self._loss_patches.append(patch)

    def revert_loss(self) -> None:
        """Drop every loss patch."""
        self._loss_patches.clear()

    def patch_optimizer_step(self, before_step_tasks: Sequence[Callable[[], Any]],
                             after_step_tasks: Sequence[Callable[[], Any]]) -> None:
        """Run ``before_step_tasks`` before and ``after_step_tasks`` after each step of the (first) optimizer."""
        def wrap(step: Callable[..., Any]) -> Callable[..., Any]:
            def patched(*args: Any, **kwargs: Any) -> Any:
                for task in before_step_tasks:
                    task()
                out = step(*args, **kwargs)
                for task in after_step_tasks:
                    task()
                return out
            return patched
        self._step_wrappers.append(wrap)

    def relay_optimizer_step(self, relay: OptimizerRelay) -> None:
        """Send each step of the (first) optimizer through ``relay``, the optimizer an engine hooked."""
        self._step_wrappers.append(lambda step: lambda *a, **k: relay.through(step, *a, **k))

    def revert_optimizer_step(self) -> None:
        """Drop every optimizer-step patch."""
        self._step_wrappers.clear()

    def add_params(self, params: Sequence[nn.Parameter]) -> None:
        """Have the (first) optimizer learn ``params`` too (a quantizer's step sizes, a distiller's adapters)."""
        self._extra_params.extend(params)

    def _patched_step(self, step: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.steps_taken += 1
            return step(*args, **kwargs)
        out: Callable[..., Any] = counted
        for wrap in self._step_wrappers:
            out = wrap(out)
        return out

    def _patch_step(self, optimizer: torch.optim.Optimizer, record: list[tuple[Any, Any, bool]]) -> None:
        """Have ``optimizer`` learn the added parameters and step through the patches (noted in ``record``)."""
        add_missing_params(optimizer, self._extra_params)
        original = optimizer.step
        record.append((optimizer, original, "step" in vars(optimizer)))
        patched = self._patched_step(original)

        def step(_opt: Any, *args: Any, **kwargs: Any) -> Any:
            return patched(*args, **kwargs)
        if hasattr(original, "_wrapped_by_lr_sched"):  # still the step an LR scheduler counts
            step._wrapped_by_lr_sched = True  # type: ignore[attr-defined]
        optimizer.step = types.MethodType(step, optimizer)  # type: ignore[method-assign]

    def _require_model(self) -> nn.Module:
        if self.model is None:
            raise ConfigError(f"{type(self).__name__} has no model bound; the pruner binds it (bind_model(model)).")
        return self.model

    def train(self, max_steps: int | None = None, max_epochs: int | None = None) -> None:
        """Train the bound model with the user's loop for ``max_steps`` steps or ``max_epochs`` epochs."""
        raise NotImplementedError

    def finetune(self) -> None:
        """Train with the user's own duration."""
        self.train()

    def evaluate(self) -> Any:
        """The user's metric of the bound model (``None`` when no evaluating function was given)."""
        raise NotImplementedError

    def get_dummy_input(self) -> Any:
        """An input the model accepts (for tracing), or ``None``."""
        return self.dummy_input


def _as_list(value: Any, kind: type, what: str, spelled: str) -> list[Any]:
    items = list(value) if isinstance(value, (list, tuple)) else [] if value is None else [value]
    bad = [type(v).__name__ for v in items if not isinstance(v, kind)]
    if bad:
        raise ConfigError(f"TorchEvaluator {what} must be {spelled} objects (e.g. slimkit.trace(torch.optim.SGD)"
                          f"(model.parameters(), lr=0.01)), got {', '.join(bad)}.")
    return items


class TorchEvaluator(Evaluator):
    """NNI 3.0's evaluator for a native PyTorch training loop.

    ``TorchEvaluator(training_func, optimizers, training_step, lr_schedulers=None, dummy_input=None,
    evaluating_func=None)``: ``training_func(model, optimizers, training_step, lr_schedulers, max_steps,
    max_epochs)`` is the user's loop, ``training_step(batch, model)`` returns the loss, ``optimizers`` is one
    optimizer or a list (the first is the one pruners patch), ``evaluating_func(model)`` returns a metric (or a
    dict whose ``"default"`` is the metric).
    """

    def __init__(self, training_func: Callable[..., Any], optimizers: torch.optim.Optimizer | Sequence[Any],
                 training_step: Callable[..., Any], lr_schedulers: Any = None, dummy_input: Any = None,
                 evaluating_func: Callable[[nn.Module], Any] | None = None) -> None:
        super().__init__(dummy_input)
        for name, fn in (("training_func", training_func), ("training_step", training_step)):
            if not callable(fn):
                raise ConfigError(f"TorchEvaluator {name} must be a function, got {type(fn).__name__}.")
        if evaluating_func is not None and not callable(evaluating_func):
            raise ConfigError(f"TorchEvaluator evaluating_func must be a function of the model, got "
                              f"{type(evaluating_func).__name__}.")
        self.optimizers = _as_list(optimizers, torch.optim.Optimizer, "optimizers", "torch.optim.Optimizer")
        if not self.optimizers:
            raise ConfigError("TorchEvaluator needs optimizers: the optimizer (or list) training_func steps.")
        self.lr_schedulers = _as_list(lr_schedulers, torch.optim.lr_scheduler.LRScheduler, "lr_schedulers",
                                      "torch.optim.lr_scheduler.LRScheduler")
        self.training_func, self.training_step, self.evaluating_func = training_func, training_step, evaluating_func
        self._single_optimizer = not isinstance(optimizers, (list, tuple))
        self._single_scheduler = lr_schedulers is not None and not isinstance(lr_schedulers, (list, tuple))

    def _step_with_patches(self, batch: Any, model: nn.Module, *args: Any, **kwargs: Any) -> Any:
        return patch_output_loss(self.training_step(batch, model, *args, **kwargs), batch, self._loss_patches)

    def train(self, max_steps: int | None = None, max_epochs: int | None = None) -> None:
        """Run ``training_func`` on the bound model with the patched loss and optimizer step."""
        model = self._require_model()
        patched: list[tuple[Any, Any, bool]] = []
        self._patch_step(self.optimizers[0], patched)
        try:
            optimizers = self.optimizers[0] if self._single_optimizer else self.optimizers
            schedulers = (self.lr_schedulers[0] if self._single_scheduler else self.lr_schedulers) \
                if self.lr_schedulers else None
            self.training_func(model, optimizers, self._step_with_patches, schedulers, max_steps, max_epochs)
        finally:
            undo_patches(self, {}, patched)

    def evaluate(self) -> Any:
        """``evaluating_func(model)``: a float, or ``(metric["default"], metric)`` for a dict; ``None`` without one."""
        model = self._require_model()
        if self.evaluating_func is None:
            return None
        metric = self.evaluating_func(model)
        return (metric.get("default"), metric) if isinstance(metric, Mapping) else metric
