"""The dimensions a channel pruner may cut, and at which ratio each.

* ``"mlp"``: channels inside a block — an MLP's intermediate channels (gate/up rows and the down projection's
  columns), a conv block's inner channels, a pooler's, each MoE expert's intermediate channels;
* ``"heads"``: whole attention heads (a key/value head with the query heads that read it, under GQA);
* ``"hidden"``: the residual stream — channels joined by a residual add or produced by an embedding: the
  embeddings, every block's output projections and the readers' input columns, the norms, the final norm and
  the head's input, all cut alike (for a CNN: the channels its residual adds join).

``dims`` is a list of these names (each cut at the pruner's sparsity) or a dict ``{name: ratio}`` (``None``:
the sparsity); ``None`` means all three.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from slimkit.engines.pruning.config import PruningConfigError

DIMS: tuple[str, ...] = ("mlp", "heads", "hidden")
Dims = dict[str, float | None]

_EXAMPLE = "['mlp', 'heads', 'hidden'] or {'mlp': 0.5, 'heads': 0.25, 'hidden': 0.3}"


def parse_dims(value: Any, where: str = "dims") -> Dims:
    """Validate ``value`` and return ``{dim: ratio or None}`` for the dims to prune (None: all three)."""
    if value is None:
        return dict.fromkeys(DIMS)
    if isinstance(value, str) or not isinstance(value, (Sequence, Mapping)):
        raise PruningConfigError(f"{where} must be a list of dimension names or a dict of name -> ratio, e.g. "
                                 f"{_EXAMPLE}; got {value!r:.80}.")
    items = value.items() if isinstance(value, Mapping) else ((name, None) for name in value)
    dims: Dims = {}
    for name, ratio in items:
        if name not in DIMS:
            raise PruningConfigError(f"{where} names {name!r}, which is not a dimension slimkit prunes; allowed: "
                                     f"{', '.join(DIMS)} (e.g. {_EXAMPLE}).")
        if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, (int, float))
                                  or not 0.0 <= float(ratio) < 1.0):
            raise PruningConfigError(f"{where}[{name!r}] must be a ratio in [0, 1) or None (the sparsity); got "
                                     f"{ratio!r}.")
        dims[name] = None if ratio is None else float(ratio)
    if not dims:
        raise PruningConfigError(f"{where} is empty, so nothing would be pruned; name at least one of "
                                 f"{', '.join(DIMS)}.")
    return dims


def ratio_for(dims: Dims, dim: str, fallback: float) -> float:
    """The ratio ``dim`` is cut at: its own, else ``fallback`` (the layers' sparsity)."""
    ratio = dims.get(dim)
    return fallback if ratio is None else ratio
