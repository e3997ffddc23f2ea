"""``trace``: NNI's ``nni.trace`` for optimizers: build the object and remember how, to build it again.

NNI 2.x pruners take a *traced* optimizer because they re-create it on wrapped parameters. slimkit's wrappers
keep each layer's parameters, so the traced optimizer is used as it is; the record matters when the model's
parameters are replaced (an iterative pruner with ``speedup=True``), where :func:`rebuild` makes a fresh
optimizer of the same class and settings on the new parameters.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from slimkit.errors import ConfigError

__all__ = ["rebuild", "trace"]

_ATTR = "_slimkit_trace"


def trace(cls_or_func: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a class (or factory) so each object it builds records ``(cls, args, kwargs)``.

    ``slimkit.trace(torch.optim.SGD)(model.parameters(), lr=0.01)`` is an ordinary SGD optimizer that can be
    rebuilt on other parameters. Objects that refuse new attributes are returned unrecorded.
    """
    if not callable(cls_or_func):
        raise ConfigError(f"trace() wraps a class or function, e.g. slimkit.trace(torch.optim.SGD); got "
                          f"{type(cls_or_func).__name__}.")

    @functools.wraps(cls_or_func)
    def build(*args: Any, **kwargs: Any) -> Any:
        obj = cls_or_func(*args, **kwargs)
        try:
            setattr(obj, _ATTR, (cls_or_func, args[1:], dict(kwargs), args))
        except (AttributeError, TypeError):
            pass
        return obj

    return build


def rebuild(optimizer: Any, model: nn.Module) -> Any:
    """A new optimizer like the traced ``optimizer`` over ``model``'s current parameters (or ``optimizer``)."""
    record = getattr(optimizer, _ATTR, None)
    if record is None:
        return optimizer
    cls, args, kwargs = record[:3]
    return trace(cls)(model.parameters(), *args, **kwargs)


def rebuild_call(obj: Any, overrides: Mapping[str, Any]) -> Any:
    """A new object like the traced ``obj``, built with the same arguments and ``overrides`` (``None`` if untraced).

    NNI 3.0's ``LightningEvaluator`` rebuilds the user's ``nni.trace(pl.Trainer)(...)`` with the duration it needs.
    """
    record = getattr(obj, _ATTR, None)
    if record is None:
        return None
    cls, _, kwargs, args = record
    return trace(cls)(*args, **{**kwargs, **overrides})
