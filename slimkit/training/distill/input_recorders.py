"""Recorders of what goes in: a method's or a function's arguments, and a model parameter (MMRazor's names).

* ``MethodInputs`` (source ``"package.module.Class.method"``) and ``FunctionInputs`` (``"package.module.function"``)
  record each call's arguments as a list in the callee's parameter order, whether they were passed by position
  or by keyword (defaults left out; a method's ``self`` is not recorded), so ``data_idx=1`` is the second one.
* ``Parameter`` (source: a ``model.named_parameters()`` name) holds the parameter itself -- recorded at every
  step without a forward, with its gradient path (a loss on it trains it).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from slimkit.errors import ConfigError, closest
from slimkit.training.distill.recorders import (
    BaseRecorder,
    FunctionOutputsRecorder,
    MethodOutputsRecorder,
    register_recorder,
)


def _bound(signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    if signature is None:
        return [*args, *kwargs.values()]
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return [*args, *kwargs.values()]
    values: list[Any] = []
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            values.extend(value)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            values.extend(value.values())
        else:
            values.append(value)
    return values


def _signature(func: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(func)
    except (TypeError, ValueError):  # builtins without a signature: positional, then keywords
        return None


class _InputsMixin:
    """The inputs recorders bind each call to the callee's signature; with no ``data_idx``, the whole list."""

    def __init__(self, source: str) -> None:
        super().__init__(source)  # type: ignore[call-arg]
        self._signature = _signature(self._original)  # type: ignore[attr-defined]

    def get_record_data(self, record_idx: int = 0, data_idx: int | None = None) -> Any:
        """The ``record_idx``-th call's arguments (a list), or its ``data_idx``-th argument."""
        if data_idx is None and self.data and 0 <= record_idx < len(self.data):
            return self.data[record_idx]
        return super().get_record_data(record_idx, data_idx)  # type: ignore[misc]


class MethodInputsRecorder(_InputsMixin, MethodOutputsRecorder):
    """Records the arguments of method ``source`` = ``"package.module.Class.method"`` (every instance's calls)."""

    def _entry(self, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> list[Any]:
        return _bound(self._signature, args, kwargs)[1:]  # without self


class FunctionInputsRecorder(_InputsMixin, FunctionOutputsRecorder):
    """Records the arguments of function ``source`` = ``"package.module.function"`` (patched in that module)."""

    def _entry(self, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> list[Any]:
        return _bound(self._signature, args, kwargs)


class ParameterRecorder(BaseRecorder):
    """Holds parameter ``source`` of the model (a ``named_parameters()`` name); ``get_record_data()`` returns it."""

    def __init__(self, source: str) -> None:
        if not isinstance(source, str) or not source:
            raise ConfigError(f"ParameterRecorder: source must be a parameter name such as 'head.fc.weight', got "
                              f"{source!r}.")
        super().__init__(source)
        self._param: torch.nn.Parameter | None = None

    def initialize(self, model: nn.Module | None = None) -> None:
        """Find the parameter (an unknown name lists the closest real ones)."""
        if model is None:
            raise ConfigError(f"ParameterRecorder({self.source!r}) needs the model to find its parameter in.")
        params = dict(model.named_parameters())
        if self.source not in params:
            raise ConfigError(f"ParameterRecorder: the model has no parameter {self.source!r}."
                              f"{closest(self.source, params)} Parameters: {', '.join(list(params)[:40])}"
                              f"{' ...' if len(params) > 40 else ''}.")
        self._param = params[self.source]
        self.data = [self._param]

    def _attach(self) -> None:
        if self._param is None:
            raise ConfigError(f"ParameterRecorder({self.source!r}) is not bound: call initialize(model) first.")
        self.data.append(self._param)

    def _detach(self) -> None:
        """Nothing to remove (no hook)."""


register_recorder("MethodInputs", MethodInputsRecorder)
register_recorder("FunctionInputs", FunctionInputsRecorder)
register_recorder("Parameter", ParameterRecorder)
