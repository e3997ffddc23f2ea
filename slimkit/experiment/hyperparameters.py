"""Auptimizer's ``parameter_config``: the training hyperparameters a script's search proposes.

Each entry names one value the script reads from its job config::

    "parameter_config": [
        {"name": "lr", "range": [0.0001, 0.1], "type": "float", "log": true},
        {"name": "epochs", "range": [2, 8], "type": "int", "interval": 2},
        {"name": "x", "range": [-5, 5], "type": "float", "n": 11},
        {"name": "optimizer", "range": ["sgd", "adam"], "type": "choice"}
    ]

``range`` is ``[min, max]`` (``float``/``int``) or the values (``choice``); ``interval`` (the grid step) or ``n``
(grid points) make a range a grid (the ``sequence`` proposer needs one for floats); ``log`` searches on a log
scale; Spearmint's ``size`` is accepted when it is 1 (one value per name). The job config the script loads with
``BasicConfig().load(sys.argv[1])`` holds each name at its top level (``config.lr``). A file may also hold a
``compression`` block with ranges in its ``config_list``: one study searches both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from slimkit.errors import ConfigError
from slimkit.experiment.space import SPEC_KEYS, Param, parse_spec, ranked

ENTRY_KEYS = ("name", *SPEC_KEYS, "size")
#: job config keys the runner writes itself: a hyperparameter may not take one of these names
RESERVED = ("job_id", "resource", "save_model", "folder_name", "n_iterations", "compression_framework",
            "compression_type", "compressor", "config_list")


def parameter_config_params(value: Any, path: str = "parameter_config") -> list[Param]:
    """Check ``parameter_config`` (a non-empty list of ``{name, range, type, ...}``) and return its parameters."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence) or not value:
        raise ConfigError(f"{path}: a non-empty list of hyperparameters such as "
                          f"[{{\"name\": \"lr\", \"range\": [0.001, 0.1], \"type\": \"float\"}}]; got {value!r}.")
    params: list[Param] = []
    seen: set[str] = set()
    for i, entry in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: an object {{\"name\": ..., \"range\": [...], \"type\": ...}}; "
                              f"got {entry!r}.")
        for key in entry:
            if key not in ENTRY_KEYS:
                raise ConfigError(f"{where}: {key!r} is not a field. Valid fields (closest first): "
                                  f"{', '.join(ranked(str(key), ENTRY_KEYS))}.")
        name = entry.get("name")
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"{where}.name: the name the script reads (a Python identifier such as 'lr'); "
                              f"got {name!r}.")
        if name in seen:
            raise ConfigError(f"{where}.name: {name!r} is given twice; each hyperparameter once.")
        if name in RESERVED:
            raise ConfigError(f"{where}.name: {name!r} is a key the runner writes into the job config itself "
                              f"({', '.join(RESERVED)}); rename the hyperparameter.")
        size = entry.get("size", 1)
        if size != 1 or isinstance(size, bool):
            raise ConfigError(f"{where}.size: only 1 (one value per name) is supported; got {size!r}. Give each "
                              "value its own entry.")
        if "range" not in entry:
            raise ConfigError(f"{where}.range: missing; [min, max] for 'float'/'int' or the values for 'choice'.")
        if entry.get("log") is not None and not isinstance(entry["log"], bool):
            raise ConfigError(f"{where}.log: true or false; got {entry['log']!r}.")
        seen.add(name)
        params.append(parse_spec({k: v for k, v in entry.items() if k in SPEC_KEYS}, where, name))
    return params


def check_clashes(names: list[str], runtime_args: Mapping[str, Any]) -> list[str]:
    """``names``, refused when ``runtime_args`` would overwrite a searched value in the job config."""
    both = [name for name in names if name in runtime_args]
    if both:
        raise ConfigError(f"runtime_args.{both[0]}: also a parameter_config name; the search sets it in every job, "
                          "so remove one of the two.")
    return names
