"""Entry points a face lends to a lower package's namespace, so no package imports upward.

Auptimizer scripts call ``aup.compression.create_compressor(...)``: with ``import slimkit as aup`` that is
``slimkit.compression.create_compressor``, but the function belongs to the experiment face above the engines.
The experiment package hands it over with :func:`provide` when it is imported (``import slimkit`` always imports it
first) and ``slimkit.compression`` calls it through :func:`provided`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slimkit.errors import ConfigError

__all__ = ["provide", "provided"]

_PROVIDED: dict[str, Callable[..., Any]] = {}


def provide(name: str, function: Callable[..., Any]) -> None:
    """Register ``function`` as the entry point ``name`` (the same function again is a no-op)."""
    known = _PROVIDED.get(name)
    if known is not None and known is not function:
        raise ConfigError(f"Entry point {name!r} is provided twice: {known.__module__} and {function.__module__}.")
    _PROVIDED[name] = function


def provided(name: str) -> Callable[..., Any]:
    """The function registered as ``name``; an error says which package provides it."""
    try:
        return _PROVIDED[name]
    except KeyError:
        raise ConfigError(f"{name} comes from slimkit.experiment, which is not imported; run `import slimkit` "
                          "first (it imports every face).") from None
