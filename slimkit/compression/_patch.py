"""Install a wrapper as a module's own ``forward`` without changing its state dict or class.

Cachers and batchers are saved with ``SaveFn.REAPPLY``: the weights they save must be the model's own, so the
wrapper is an instance attribute (``module.forward``), not a parent module. A deep copy of the module copies the
wrapper with it, bound to the copy.
"""

from __future__ import annotations

from typing import Any

import torch


class ForwardPatch:
    """Callable installed as ``module.forward``: it calls ``handler(module, inner, args, kwargs)``.

    ``inner`` is the forward the module had before (its class's, or an earlier patch), so patches stack.
    """

    def __init__(self, module: torch.nn.Module, handler: Any) -> None:
        self.module = module
        self.inner = module.forward
        self.handler = handler

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the handler around the previous forward."""
        return self.handler(self.module, self.inner, args, kwargs)


def patch_forward(module: torch.nn.Module, attribute: str, handler: Any) -> torch.nn.Module:
    """Make ``handler`` wrap ``module``'s forward and expose it as ``module.<attribute>``; return ``module``."""
    module.forward = ForwardPatch(module, handler)
    setattr(module, attribute, handler)
    return module
