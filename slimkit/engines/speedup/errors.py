"""Errors raised by the speedup: every message names the op, the layers and the config_list entry that avoids it."""

from __future__ import annotations

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
