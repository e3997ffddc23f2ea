"""slimkit's exception types. Every message says what was given, what is allowed and how to fix it."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any


class SlimkitError(Exception):
    """Base class for all errors slimkit raises on purpose."""


class ConfigError(SlimkitError, ValueError):
    """A SmashConfig key, value or combination is invalid."""


class AlgorithmNotFoundError(ConfigError, KeyError):
    """An algorithm name is not registered."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class RegistryError(SlimkitError):
    """An algorithm was registered wrongly (duplicate name, bad attributes, contradictory compatibility)."""


class ModelNotSupportedError(SlimkitError, TypeError):
    """An algorithm's model_check_fn refused the model."""


class MissingComponentError(SlimkitError, ValueError):
    """An algorithm needs a tokenizer, processor or dataset that the SmashConfig does not have."""


class MissingPackageError(SlimkitError, ImportError):
    """An optional package an algorithm needs is not installed."""


class SaveLoadError(SlimkitError, OSError):
    """A saved model directory is missing, incomplete, corrupt, or needs pickle without permission."""


class DataError(SlimkitError, ValueError):
    """A dataset id, dataset or collate function is unusable."""


class QueueFullError(SlimkitError, RuntimeError):
    """A bounded request queue (the dynamic batcher's) is full; the request was refused, not run (HTTP 503)."""


def closest(given: str, allowed: Iterable[str], n: int = 3) -> str:
    """Return a 'did you mean' hint for ``given`` among ``allowed`` ('' when nothing is close)."""
    matches = difflib.get_close_matches(given, list(allowed), n=n, cutoff=0.5)
    return f" Did you mean {', '.join(repr(m) for m in matches)}?" if matches else ""


def check_int(name: str, value: Any, minimum: int = 1, maximum: int | None = None, *, meaning: str = "",
              error: type[Exception] = ConfigError) -> int:
    """Return ``value`` if it is an int (not a bool) in ``[minimum, maximum]``, else raise ``error``.

    The message names ``name`` (the caller's spelling, e.g. ``"DCFF max_iters"``), what is allowed, what ``meaning``
    the number has, and what was given: ``"max_iters must be an integer >= 1, got 0."``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (
            maximum is not None and value > maximum):
        allowed = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise error(f"{name} must be an integer {allowed}{f' ({meaning})' if meaning else ''}, got {value!r}.")
    return value


def check_number(name: str, value: Any, low: float | None = None, high: float | None = None, *,
                 open_low: bool = False, open_high: bool = False, meaning: str = "",
                 error: type[Exception] = ConfigError) -> float:
    """Return ``value`` as a float if it is a real number (not a bool) between ``low`` and ``high``, else raise.

    A bound that is None is not checked; ``open_low`` / ``open_high`` exclude the bound itself. The message says
    what is allowed and what was given: ``"lr must be a number > 0, got -1.0."``, ``"... in [0, 1), got 1.5."``.
    """
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and (
        low is None or (value > low if open_low else value >= low)) and (
        high is None or (value < high if open_high else value <= high))
    if not ok:
        if low is not None and high is not None:
            allowed = f" in {'(' if open_low else '['}{low}, {high}{')' if open_high else ']'}"
        elif low is not None:
            allowed = f" {'>' if open_low else '>='} {low}"
        else:
            allowed = "" if high is None else f" {'<' if open_high else '<='} {high}"
        raise error(f"{name} must be a number{allowed}{f' ({meaning})' if meaning else ''}, got {value!r}.")
    return float(value)
