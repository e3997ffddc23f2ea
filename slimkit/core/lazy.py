"""Lazy public names for a package's ``__init__`` (PEP 562), so importing the package imports nothing heavy.

``__getattr__, __dir__ = lazy_exports(__name__, {"SmashConfig": "slimkit.config", ...})`` at the bottom of an
``__init__``: ``package.SmashConfig`` (and ``from package import SmashConfig``) imports ``slimkit.config`` on first
use and keeps the name in the package; a name mapped to ``"<package>.<name>"`` is that submodule itself.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``, resolving ``exports`` (name -> module) on demand."""

    def __getattr__(name: str) -> Any:  # noqa: N807  (the module hook PEP 562 names)
        try:
            source = exports[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        module = import_module(source)
        value = module if source == f"{package}.{name}" else getattr(module, name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:  # noqa: N807
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
