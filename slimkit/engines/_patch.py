"""Install a wrapper as a module's own ``forward`` without changing its state dict or class.

Cachers and batchers are saved with ``SaveFn.REAPPLY``: the weights they save must be the model's own, so the
wrapper is an instance attribute (``module.forward``), not a parent module. A deep copy of the module copies the
wrapper with it, bound to the copy.
"""

from __future__ import annotations

from typing import Any

import torch


class ForwardPatch:
    """Callable installed as ``module.<method>`` (default ``forward``); it calls ``handler(module, inner, args, kw)``.

    ``inner`` is the method the module had before (its class's, or an earlier patch), so patches stack.
    """

    def __init__(self, module: torch.nn.Module, handler: Any, method: str = "forward", inner: Any = None) -> None:
        self.module = module
        self.inner = getattr(module, method) if inner is None else inner
        self.handler = handler

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the handler around the previous forward."""
        return self.handler(self.module, self.inner, args, kwargs)


def patch_forward(module: torch.nn.Module, attribute: str, handler: Any, method: str = "forward") -> torch.nn.Module:
    """Make ``handler`` wrap ``module.<method>`` and expose it as ``module.<attribute>``; return ``module``."""
    setattr(module, method, ForwardPatch(module, handler, method))
    setattr(module, attribute, handler)
    return module


def patch_beneath_caches(module: torch.nn.Module, attribute: str, handler: Any) -> torch.nn.Module:
    """Like :func:`patch_forward`, but installed beneath the forward patches that answer from a cache.

    Patches whose handler sets ``answers_before_batching = True`` stay in front, so cached calls return at once
    and only misses reach ``handler``.
    """
    holder, current = None, module.forward
    while isinstance(current, ForwardPatch) and getattr(current.handler, "answers_before_batching", False):
        holder, current = current, current.inner
    if holder is None:
        return patch_forward(module, attribute, handler)
    holder.inner = ForwardPatch(module, handler, inner=current)
    setattr(module, attribute, handler)
    return module
