"""NNI 3.0's pruning ``config_list`` keys, translated once into NNI 2.x's (which the 2.x face turns into slimkit's).

An NNI 3.0 entry selects modules by ``op_names``, ``op_names_re``, ``op_types``, ``exclude_op_names``,
``exclude_op_names_re`` and ``exclude_op_types`` (``(op_names | op_names_re) & op_types - excluded``, as NNI
3.0 does) and says how much to prune with ``sparse_ratio`` (each layer's share), ``max_sparse_ratio`` (a cap under
global ranking), ``global_group_id`` (entries with the same id are ranked together: ``sparse_ratio`` is then the
share the group loses), ``dependency_group_id`` (coupled layers share one channel choice) and ``granularity``
(``"default"``/``"out_channel"``: output channels for the filter pruners, single weights for ``LevelPruner``).
``target_names`` may name ``"weight"`` and ``"bias"`` (the bias follows the weight's channels) and
``target_settings`` may carry the same keys for ``"weight"``.

:func:`v2_config_from_v3` turns such a list into one NNI 2.x list (one entry per layer, ``op_names`` explicit;
one ``total_sparsity`` entry per global group) and says whether it needs global ranking or dependency-aware
pruning. ``sparse_threshold`` and ``min_sparse_ratio`` are refused: slimkit's engines prune to ratios.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from slimkit.engines.pruning.config import PruningConfigError
from slimkit.errors import closest
from slimkit.faces.nni.v2.config import fraction

__all__ = ["SELECT_KEYS", "V3_KEYS", "V3Config", "check_entry", "dummy_input_of", "is_v3_config",
           "remember_dummy_input", "select_modules", "v2_config_from_v3"]

#: the keys that select an NNI 3.0 entry's modules (pruning, quantization and distillation alike)
SELECT_KEYS = ("op_names", "op_names_re", "op_types", "exclude_op_names", "exclude_op_names_re", "exclude_op_types")
_SPARSE = ("sparse_ratio", "max_sparse_ratio", "global_group_id", "dependency_group_id", "granularity")
_REFUSED = {
    "sparse_threshold": "slimkit's pruners prune to a ratio; give 'sparse_ratio' (the share of weights to remove)",
    "min_sparse_ratio": "global ranking in slimkit caps layers from above only ('max_sparse_ratio'); drop it",
}
#: every key an NNI 3.0 pruning entry may carry here
V3_KEYS = (*SELECT_KEYS, *_SPARSE, "target_names", "target_settings", *_REFUSED)
#: keys only NNI 3.0 uses: an entry with one of them is read as NNI 3.0's
_V3_ONLY = tuple(k for k in V3_KEYS if k not in ("op_names", "op_types"))
#: keys an NNI 1.x/2.x entry carries (a list with none of them and no 3.0 key is read as 3.0's, to name its keys)
_V2_MARKS = ("sparsity", "sparsity_per_layer", "total_sparsity", "exclude", "op_partial_names",
             "max_sparsity_per_layer", "quant_types", "quant_bits")
_TARGETS = ("weight", "bias")
_GRANULARITIES = ("default", "out_channel")

#: dummy inputs :func:`auto_set_denpendency_group_ids` traced a model with, for the pruner that reads its groups
_DUMMY_INPUTS: weakref.WeakKeyDictionary[nn.Module, Any] = weakref.WeakKeyDictionary()


def remember_dummy_input(model: nn.Module, dummy_input: Any) -> None:
    """Keep the input a dependency analysis of ``model`` was traced with (the pruner retraces with it)."""
    _DUMMY_INPUTS[model] = dummy_input


def dummy_input_of(model: nn.Module) -> Any:
    """The input :func:`remember_dummy_input` kept for ``model`` (``None`` when none was)."""
    return _DUMMY_INPUTS.get(model)


@dataclass
class V3Config:
    """An NNI 3.0 config list translated: the NNI 2.x list and what it needs from the pruner."""

    config_list: list[dict[str, Any]]
    global_ranking: bool
    dependency_aware: bool
    dummy_input: Any = None
    #: some entry asked for ``granularity: "out_channel"`` (whole output channels, even for element pruners)
    out_channel: bool = False


def is_v3_config(config_list: Any) -> bool:
    """Whether ``config_list`` is NNI 3.0's: some entry carries a key only NNI 3.0 uses, or none an NNI 2.x one."""
    if isinstance(config_list, (str, bytes, Mapping)) or not isinstance(config_list, Sequence):
        return False
    entries = [e for e in config_list if isinstance(e, Mapping)]
    if any(any(k in e for k in _V3_ONLY) for e in entries):
        return True
    return bool(entries) and not any(any(k in e for k in _V2_MARKS) for e in entries)


def check_entry(entry: Any, where: str, keys: Sequence[str], kind: str,
                error: type[Exception] = PruningConfigError, hint: str = "") -> Mapping[str, Any]:
    """An NNI 3.0 ``config_list`` entry: a dict whose keys are all in ``keys`` (``kind``: "pruning"...)."""
    if not isinstance(entry, Mapping):
        raise error(f"{where} must be a dict, got {type(entry).__name__}.")
    unknown = [k for k in entry if k not in keys]
    if unknown:
        raise error(f"{where} has unknown key {unknown[0]!r}.{closest(unknown[0], keys)} NNI 3.0's {kind} keys: "
                    f"{', '.join(keys)}{hint}.")
    return entry


def _names(value: Any, where: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise PruningConfigError(f"{where} must be a list of strings, got {value!r}.")
    return list(value)


def _flatten(entry: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The entry with ``target_settings['weight']`` merged in and ``target_names`` checked."""
    out = dict(check_entry(entry, where, V3_KEYS, "pruning",
                           hint=" (NNI 2.x's lists give 'sparsity' or 'total_sparsity' instead)"))
    for key, why in _REFUSED.items():
        if key in out:
            raise PruningConfigError(f"{where}[{key!r}] is not supported: {why}.")
    targets = _names(out.pop("target_names", ["weight", "bias"]), f"{where}['target_names']")
    bad = [t for t in targets if t not in _TARGETS]
    if bad or "weight" not in targets:
        raise PruningConfigError(f"{where}['target_names'] must name 'weight' (and may name 'bias'), got {targets!r}; "
                                 "slimkit prunes weights (the bias follows the weight's channels), not inputs or "
                                 "outputs.")
    settings = out.pop("target_settings", {})
    if not isinstance(settings, Mapping) or any(t not in _TARGETS for t in settings):
        raise PruningConfigError(f"{where}['target_settings'] must be a dict keyed by 'weight' (or 'bias'), got "
                                 f"{settings!r}.")
    for target, values in settings.items():
        if not isinstance(values, Mapping) or any(k not in _SPARSE for k in values):
            raise PruningConfigError(f"{where}['target_settings'][{target!r}] must be a dict of "
                                     f"{', '.join(_SPARSE)}; got {values!r}.")
        out.update({k: v for k, v in values.items() if target == "weight" or k not in out})
    granularity = out.get("granularity", "default")
    if granularity not in _GRANULARITIES:
        raise PruningConfigError(f"{where}['granularity'] must be one of {', '.join(map(repr, _GRANULARITIES))} "
                                 f"(slimkit prunes output channels, or single weights with LevelPruner), got "
                                 f"{granularity!r}.")
    return out


def _modules(model: nn.Module) -> list[tuple[str, str]]:
    return [(n, type(m).__name__) for n, m in model.named_modules() if n]


def select_modules(model: nn.Module, entry: Mapping[str, Any], default_types: Sequence[str], where: str) -> list[str]:
    """The layer names an NNI 3.0 entry selects: ``(op_names | op_names_re) & op_types - excluded``, in model order.

    Without ``op_types`` the named layers are taken whatever their type (NNI 3.0's rule); an entry naming no
    layer and no type selects ``default_types``.
    """
    modules = _modules(model)
    known = [n for n, _ in modules]
    names = _names(entry.get("op_names", []), f"{where}['op_names']")
    for name in names:
        if name not in known:
            raise PruningConfigError(f"{where} op_names entry {name!r} is no layer of the model."
                                     f"{closest(name, known)}")
    patterns = [re.compile(p) for p in _names(entry.get("op_names_re", []), f"{where}['op_names_re']")]
    by_name = set(names) | {n for n in known if any(p.match(n) for p in patterns)}
    if "op_types" in entry:
        types = set(_names(entry["op_types"], f"{where}['op_types']"))
    else:  # NNI 3.0: named layers of any type; nothing named: the pruner's default types
        types = {t for n, t in modules if n in by_name} if names or patterns else set(default_types)
    chosen = [n for n, t in modules if t in types and (n in by_name or not (names or patterns))]
    drop = set(_names(entry.get("exclude_op_names", []), f"{where}['exclude_op_names']"))
    drop_re = [re.compile(p) for p in _names(entry.get("exclude_op_names_re", []), f"{where}['exclude_op_names_re']")]
    drop_types = set(_names(entry.get("exclude_op_types", []), f"{where}['exclude_op_types']"))
    return [n for n, t in modules if n in chosen and n not in drop and t not in drop_types
            and not any(p.match(n) for p in drop_re)]


def aligned_output(model: nn.Module, entry: Mapping[str, Any], where: str) -> bool:
    """Whether ``entry`` is NNI 3.0's "this layer's output follows that layer's weight" entry (checked).

    NNI 3.0's fusion examples add, for each BatchNorm, ``{"op_names": [bn], "target_names": ["_output_"],
    "target_settings": {"_output_": {"align": {"module_name": conv, "target_name": "weight", "dims": [0]},
    "granularity": "per_channel"}}}``: the norm's output channels are masked as its conv's output channels.
    slimkit's pruners mask the conv and ``ModelSpeedup`` removes the same channels from the norm after it, so
    such an entry asks for nothing more; anything else under ``_output_`` is refused.
    """
    if list(entry.get("target_names", [])) != ["_output_"]:
        return False
    settings = entry.get("target_settings", {}).get("_output_", {}) if isinstance(
        entry.get("target_settings"), Mapping) else {}
    align = settings.get("align") if isinstance(settings, Mapping) else None
    if not isinstance(align, Mapping):
        raise PruningConfigError(f"{where}: target_names ['_output_'] without an 'align' setting masks activations, "
                                 "which slimkit's pruners do not; prune the layer's 'weight' (the default).")
    layers = [n for n, _ in _modules(model)]
    source = align.get("module_name")
    if source not in layers:
        raise PruningConfigError(f"{where}['target_settings']['_output_']['align']['module_name'] {source!r} is no "
                                 f"layer of the model.{closest(str(source), layers)}")
    if align.get("target_name", "weight") != "weight" or list(align.get("dims", [0])) != [0]:
        raise PruningConfigError(f"{where}: 'align' must follow the output channels of a layer's weight "
                                 f"(target_name 'weight', dims [0]), got {dict(align)!r}.")
    return True


def v2_config_from_v3(model: nn.Module, config_list: Any, default_types: Sequence[str],
                      who: str = "pruner") -> V3Config:
    """Translate an NNI 3.0 pruning ``config_list`` for ``model`` into NNI 2.x's (see the module docstring)."""
    if isinstance(config_list, (str, bytes, Mapping)) or not isinstance(config_list, Sequence) or not config_list:
        raise PruningConfigError(f"{who} config_list must be a non-empty list of dicts, e.g. [{{'sparse_ratio': 0.5, "
                                 "'op_types': ['Conv2d']}].")
    types = dict(_modules(model))
    per_layer: dict[str, dict[str, Any]] = {}
    groups: dict[Any, dict[str, Any]] = {}
    dependency = out_channel = False
    for index, given in enumerate(config_list):
        where = f"config_list[{index}]"
        if not isinstance(given, Mapping):
            raise PruningConfigError(f"{where} must be a dict like {{'sparse_ratio': 0.5, 'op_types': ['Conv2d']}}, "
                                     f"got {type(given).__name__}.")
        if aligned_output(model, given, where):
            continue  # the BatchNorm follows its layer's channels: the speedup removes them together
        entry = _flatten(given, where)
        if "sparse_ratio" not in entry:
            raise PruningConfigError(f"{where} gives no 'sparse_ratio' (the share of each selected layer's weights "
                                     "to prune; NNI 2.x's lists say 'sparsity' or 'total_sparsity').")
        ratio = fraction(entry["sparse_ratio"], f"{where}['sparse_ratio']")
        cap = fraction(entry["max_sparse_ratio"], f"{where}['max_sparse_ratio']") \
            if "max_sparse_ratio" in entry else 1.0
        dependency = dependency or "dependency_group_id" in entry
        out_channel = out_channel or entry.get("granularity") == "out_channel"
        layers = select_modules(model, entry, default_types, where)
        if not layers:
            continue  # NNI 3.0 skips an entry that selects nothing
        for name in layers:  # a later entry overrides an earlier one for the same layer
            for group in groups.values():
                if name in group["op_names"]:
                    group["op_names"].remove(name)
            per_layer.pop(name, None)
        if "global_group_id" in entry:
            group = groups.setdefault(entry["global_group_id"], {"total_sparsity": ratio, "op_names": [],
                                                                 "max_sparsity_per_layer": {}})
            if group["total_sparsity"] != ratio:
                raise PruningConfigError(f"{where}: entries of global_group_id {entry['global_group_id']!r} give "
                                         f"different sparse_ratio ({group['total_sparsity']} and {ratio}); a global "
                                         "group shares one.")
            group["op_names"] += layers
            group["max_sparsity_per_layer"].update({n: cap for n in layers})
        else:
            per_layer.update({n: {"sparsity": ratio, "op_names": [n], "op_types": [types[n]]} for n in layers})
    kept = [g for g in groups.values() if g["op_names"]]
    for group in kept:
        group["op_types"] = sorted({types[n] for n in group["op_names"]})
    out = list(per_layer.values()) + kept
    if not out:
        raise PruningConfigError(f"{who}: no entry of config_list selects a layer of the model.")
    return V3Config(out, bool(groups), dependency, dummy_input_of(model), out_channel)
