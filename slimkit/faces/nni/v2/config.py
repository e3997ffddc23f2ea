"""NNI 2.x ``config_list`` keys on top of slimkit's pruning config.

The keys are ``total_sparsity``, ``max_sparsity_per_layer`` and ``op_partial_names``:

* ``sparsity`` / ``sparsity_per_layer``: every selected layer loses that fraction (as in NNI 1.x).
* ``total_sparsity``: the selected layers *together* lose that fraction of their weights. In ``mode="global"``
  the units (channels, or weights for level pruning) of all layers of the entry are ranked together; in
  ``"normal"`` mode each layer gets it, as in NNI 2.x.
* ``max_sparsity_per_layer``: a cap for global ranking, one number or ``{layer name: number}``.
* ``op_partial_names``: substrings; every module whose qualified name contains one is selected (added to
  ``op_names``).

:func:`canonical_config_list` turns such a list into slimkit's form and returns the global groups separately.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from slimkit.engines.pruning.config import PruningConfigError, nni2_keys
from slimkit.errors import check_number


@dataclass
class GlobalGroup:
    """The layers one ``total_sparsity`` entry ranks together, with the entry's caps."""

    index: int
    total_sparsity: float
    max_sparsity_per_layer: float | dict[str, float] = 1.0
    layers: list[str] = field(default_factory=list)

    def cap(self, layer: str) -> float:
        """The largest fraction ``layer`` may lose."""
        if isinstance(self.max_sparsity_per_layer, Mapping):
            return float(self.max_sparsity_per_layer.get(layer, 1.0))
        return float(self.max_sparsity_per_layer)


def fraction(value: Any, where: str, upper_open: bool = True) -> float:
    """``value`` as a float in ``[0, 1)`` (``(0, 1]`` when not ``upper_open``), else an error naming ``where``."""
    return check_number(where, value, 0, 1, open_low=not upper_open, open_high=upper_open, error=PruningConfigError)


def _caps(value: Any, index: int) -> float | dict[str, float]:
    where = f"config_list[{index}]['max_sparsity_per_layer']"
    if isinstance(value, Mapping):
        return {str(k): fraction(v, f"{where}[{k!r}]", upper_open=False) for k, v in value.items()}
    return fraction(value, where, upper_open=False)


def canonical_config_list(model: nn.Module, config_list: Any, mode: str) -> tuple[list[dict[str, Any]],
                                                                                   list[GlobalGroup]]:
    """The slimkit ``config_list`` for an NNI 2.x one, and the ``total_sparsity`` groups ranked together globally.

    Global groups are returned only when ``mode == "global"``; otherwise ``total_sparsity`` is each layer's
    sparsity (NNI 2.x's "normal" allocation) and ``max_sparsity_per_layer`` has nothing to cap.
    """
    if isinstance(config_list, (str, bytes, Mapping)) or not isinstance(config_list, Sequence):
        raise PruningConfigError("config_list must be a list of dicts, e.g. [{'total_sparsity': 0.5, 'op_types': "
                                 f"['Conv2d']}}], got {type(config_list).__name__}.")
    out: list[dict[str, Any]] = []
    groups: list[GlobalGroup] = []
    for index, given in enumerate(config_list):
        if not isinstance(given, Mapping):
            raise PruningConfigError(f"config_list[{index}] must be a dict like {{'sparsity': 0.5, 'op_types': "
                                     f"['Conv2d']}}, got {type(given).__name__}.")
        entry = copy.deepcopy(dict(given))
        caps = _caps(entry.pop("max_sparsity_per_layer"), index) if "max_sparsity_per_layer" in entry else 1.0
        total = "total_sparsity" in entry
        entry = nni2_keys(model, entry, index)  # op_partial_names into op_names, total_sparsity as sparsity
        if total:
            entry["sparsity"] = fraction(entry["sparsity"], f"config_list[{index}]['total_sparsity']")
            if mode == "global" and not entry.get("exclude", False):
                groups.append(GlobalGroup(index, entry["sparsity"], caps))
        out.append(entry)
    return out, groups
