"""Errors raised by the speedup: every message names the op, the layers and the config_list entry that avoids it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slimkit.errors import SlimkitError


class SpeedupError(SlimkitError, RuntimeError):
    """The speedup could not shrink the model (bad masks, bad kept-channel record, or a broken result)."""


class UnsupportedOpError(SpeedupError):
    """Pruned channels flow into an op or module that the speedup cannot shrink.

    Attributes give the same facts as the message so tools can act on them: ``op`` (the op or module
    type), ``location`` (the module where it runs), ``layers`` (the pruned layers whose channels reach
    it) and ``exclude`` (the config_list entry that keeps those layers unpruned).
    """

    def __init__(self, op: str, location: str, layers: list[str], detail: str = "") -> None:
        self.op = op
        self.location = location or "<model>"
        self.layers = sorted(layers)
        self.exclude = {"exclude": True, "op_names": self.layers}
        why = f" ({detail})" if detail else ""
        super().__init__(
            f"Cannot remove the pruned channels of {self.layers}: they flow into `{op}` at "
            f"'{self.location}', which the speedup cannot shrink{why}. Exclude these layers from pruning "
            f"with the config_list entry {self.exclude!r}, or remove their masks before the speedup."
        )


def check_kept(name: str, key: str, value: Any, size: int, count: int | None = None) -> list[int]:
    """``kept_channels[name][key]`` as checked indices: ``count`` (default 1 to ``size``) distinct ints in [0, size)."""
    if not isinstance(value, Sequence) or isinstance(value, str) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in value
    ):
        raise SpeedupError(f"kept_channels[{name!r}][{key!r}] must be a list of ints; got {value!r:.80}.")
    if not value or len(set(value)) != len(value) or not all(0 <= i < size for i in value) or count not in (
            None, len(value)):
        raise SpeedupError(
            f"kept_channels[{name!r}][{key!r}] must hold {count or f'1 to {size}'} distinct indices in [0, {size}); "
            f"got {len(value)} values from {min(value, default=None)} to {max(value, default=None)}. Was the record "
            "made for a different base model (or a model that was already shrunk)?"
        )
    return list(value)
