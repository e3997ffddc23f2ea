"""slimkit's exception types. Every message says what was given, what is allowed and how to fix it."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


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
