"""``nni.compression.utils`` of NNI 3.0: ``auto_set_denpendency_group_ids`` (NNI's spelling) over slimkit's tracer.

``config_list = auto_set_denpendency_group_ids(model, config_list, dummy_input)`` traces the model once
(:func:`slimkit.engines.speedup.report.channel_dependency_report`) and returns the list with one entry per
selected layer; layers whose output channels are coupled (a residual add, a depthwise conv, a concat feeding one
consumer) carry the same ``dependency_group_id``, so the pruner keeps one channel choice for them and the speedup
removes the channels from all of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.speedup.report import channel_dependency_report
from slimkit.faces.nni.v3.config import SELECT_KEYS, dummy_input_of, remember_dummy_input, select_modules

__all__ = ["auto_set_denpendency_group_ids", "auto_set_dependency_group_ids", "slim_norm_config"]

_DEFAULT_TYPES = ("Conv2d", "Linear")
_NORMS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d")


def auto_set_denpendency_group_ids(model: nn.Module, config_list: Sequence[Mapping[str, Any]],
                                   dummy_input: Any) -> list[dict[str, Any]]:
    """``config_list`` with one entry per selected layer and a shared ``dependency_group_id`` per coupled group."""
    if not isinstance(model, nn.Module):
        raise PruningConfigError(f"auto_set_denpendency_group_ids needs a torch.nn.Module, got {type(model).__name__}.")
    if isinstance(config_list, (str, bytes, Mapping)) or not isinstance(config_list, Sequence):
        raise PruningConfigError("auto_set_denpendency_group_ids needs config_list as a list of dicts.")
    group_of: dict[str, int] = {}
    for index, group in enumerate(channel_dependency_report(model, dummy_input)):
        names = list(group)
        if len(names) > 1:
            group_of.update({name: index for name in names})
    types = {n: type(m).__name__ for n, m in model.named_modules() if n}
    out: list[dict[str, Any]] = []
    for index, entry in enumerate(config_list):
        if not isinstance(entry, Mapping):
            raise PruningConfigError(f"config_list[{index}] must be a dict, got {type(entry).__name__}.")
        rest = {k: v for k, v in entry.items() if k not in SELECT_KEYS}
        for name in select_modules(model, entry, _DEFAULT_TYPES, f"config_list[{index}]"):
            one = {**rest, "op_names": [name], "op_types": [types[name]]}
            if name in group_of:
                one["dependency_group_id"] = group_of[name]
            out.append(one)
    remember_dummy_input(model, dummy_input)
    return out


auto_set_dependency_group_ids = auto_set_denpendency_group_ids  # the spelling without NNI's typo


def slim_norm_config(model: nn.Module, config_list: Sequence[Mapping[str, Any]],
                     dummy_input: Any = None) -> list[dict[str, Any]]:
    """NNI 3.0 ``SlimPruner`` entries selecting convs/linears, re-aimed at the BatchNorm layers that follow them.

    NNI 3.0 learns a scaling factor per output channel of the selected layers; slimkit's Slim (the paper's form)
    uses the scales of the BatchNorm after each of them, found by tracing the model on ``dummy_input`` (else the
    input ``auto_set_denpendency_group_ids`` saw). Entries that already select norms are kept.
    """
    types = {n: type(m).__name__ for n, m in model.named_modules() if n}
    picked = [select_modules(model, e, _NORMS, f"config_list[{i}]") if isinstance(e, Mapping) else []
              for i, e in enumerate(config_list)]
    if all(types[n] in _NORMS for names in picked for n in names):
        return [dict(e) for e in config_list]
    given = dummy_input if dummy_input is not None else dummy_input_of(model)
    if given is None:
        raise PruningConfigError("SlimPruner prunes by BatchNorm scales: select the BatchNorm layers (op_types "
                                 "['BatchNorm2d']), or give the evaluator a dummy_input so the norms after the "
                                 "selected layers can be found.")
    norm_of: dict[str, list[str]] = {}
    for info in channel_dependency_report(model, given).infos:
        for member in info.members:
            norm_of[member] = [f for f in info.followers if types.get(f) in _NORMS]
    out = []
    for entry, names in zip(config_list, picked, strict=True):
        if not isinstance(entry, Mapping):
            out.append(entry)  # the config translation names what is wrong with it
            continue
        rest = {k: v for k, v in entry.items() if k not in SELECT_KEYS}
        norms = []
        for name in names:
            if types[name] in _NORMS:
                norms.append(name)
            elif not norm_of.get(name):
                raise PruningConfigError(f"SlimPruner: layer {name!r} is followed by no BatchNorm, whose scales "
                                         "Slim ranks; leave it out of config_list or use L1NormPruner / TaylorPruner.")
            else:
                norms += [n for n in norm_of[name] if n not in norms]
        if norms:
            out.append({**rest, "op_names": norms, "op_types": sorted({types[n] for n in norms})})
    return out
