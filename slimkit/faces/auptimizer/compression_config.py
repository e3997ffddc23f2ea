"""Reading the ``compression`` part of an Auptimizer-style experiment into a compressor name and config_list.

Accepted shapes (all give the same result)::

    {"name": ..., "script": ..., "compression": {"framework": "torch", "type": "pruning",
                                                 "compressor": "l1_filter", "config_list": [...]}}
    {"framework": "torch", "type": "pruning", "compressor": "l1_filter", "config_list": [...]}
    {"compression_framework": "torch", "compression_type": "pruning", "compressor": "l1_filter",
     "config_list": [...], "folder_name": ..., "save_model": ...}      # the job config a script receives
    "l1_filter"  (with config_list=[...] passed separately)
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slimkit.errors import ConfigError, closest
from slimkit.experiment.space import is_spec

FRAMEWORKS = ("torch", "pytorch")
SECTION_KEYS = ("framework", "type", "compressor", "config_list")
RUNNER_ONLY_KEYS = ("expand_op_names",)  # meaningful to the automatic search only; dropped for a fixed run


@dataclass
class CompressionSettings:
    """What to build: the compressor name, the experiment's declared type (or None) and the config_list."""

    compressor: str
    type: str | None
    config_list: list[dict[str, Any]]


def _pick(section: Mapping[str, Any], *keys: str) -> Any:
    found = [k for k in keys if k in section]
    if len(found) > 1 and len({repr(section[k]) for k in found}) > 1:
        raise ConfigError(f"The compression config gives both {found[0]!r} and {found[1]!r} with different values "
                          f"({section[found[0]]!r} vs {section[found[1]]!r}); keep one.")
    return section[found[0]] if found else None


def _fixed_config_list(config_list: Any) -> list[dict[str, Any]]:
    """Copy ``config_list``, refusing search spaces and dropping runner-only keys."""
    if isinstance(config_list, (str, bytes, Mapping)) or not isinstance(config_list, Sequence):
        raise ConfigError("config_list must be a list of dicts, e.g. [{'sparsity': 0.5, 'op_types': ['Conv2d']}]; "
                          f"got {type(config_list).__name__}.")
    out = []
    for i, entry in enumerate(config_list):
        if not isinstance(entry, Mapping):
            raise ConfigError(f"config_list[{i}] must be a dict like {{'sparsity': 0.5, 'op_types': ['Conv2d']}}; "
                              f"got {type(entry).__name__}.")
        for key, value in entry.items():
            if is_spec(value):
                raise ConfigError(
                    f"config_list[{i}][{key!r}] is a search space {dict(value)!r}; a single compression run needs a "
                    "fixed value. Run the experiment with --automatic to search it, or write a number here."
                )
        out.append({k: copy.deepcopy(v) for k, v in entry.items() if k not in RUNNER_ONLY_KEYS})
    return out


def parse_compression_config(config: Any, config_list: Sequence[Mapping[str, Any]] | None = None
                             ) -> CompressionSettings:
    """Turn any accepted experiment shape (see the module docstring) into :class:`CompressionSettings`."""
    if isinstance(config, str):
        if config_list is None:
            raise ConfigError(f"create_compressor(model, {config!r}) needs config_list=[...] as well, e.g. "
                              "[{'sparsity': 0.5, 'op_types': ['Conv2d']}].")
        return CompressionSettings(config, None, _fixed_config_list(config_list))
    if not isinstance(config, Mapping):
        raise ConfigError("config must be an experiment dict (with 'compression' or 'compressor' and 'config_list') "
                          f"or a compressor name; got {type(config).__name__}.")
    section = config.get("compression", config)  # a nested "compression" block has strict keys
    if section is not config:
        if not isinstance(section, Mapping):
            raise ConfigError(f"The experiment's 'compression' must be a dict with {', '.join(SECTION_KEYS)}; "
                              f"got {type(section).__name__}.")
        for key in section:
            if key not in SECTION_KEYS:
                raise ConfigError(f"Unknown key {key!r} in the experiment's 'compression' block."
                                  f"{closest(str(key), SECTION_KEYS)} Allowed keys: {', '.join(SECTION_KEYS)}.")
    name = section.get("compressor")
    if name is None:
        raise ConfigError(
            "The compression config has no 'compressor'; add e.g. 'compressor': 'l1_filter' "
            f"(keys given: {', '.join(map(str, section)) or '(none)'})."
        )
    framework = _pick(section, "framework", "compression_framework")
    if framework is not None and str(framework).lower() not in FRAMEWORKS:
        raise ConfigError(f"Compression framework {framework!r} is not supported: slimkit compresses PyTorch models; "
                          "set 'framework': 'torch'.")
    kind = _pick(section, "type", "compression_type")
    given = section.get("config_list")
    if given is not None and config_list is not None:
        raise ConfigError("config_list is given both in the config and as an argument; pass it once.")
    chosen = given if given is not None else config_list
    if chosen is None:
        raise ConfigError(f"The compression config for {name!r} has no 'config_list'; add e.g. "
                          "'config_list': [{'sparsity': 0.5, 'op_types': ['Conv2d']}].")
    return CompressionSettings(name, kind, _fixed_config_list(chosen))
