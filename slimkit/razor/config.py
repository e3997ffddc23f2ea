"""Config files for the razor face: dicts, JSON or YAML, with ``_base_`` inheritance and ``_delete_``.

``_base_`` (a path or a list of paths, relative to the file) names configs to start from; the file's own keys
are merged into them recursively. A block with ``_delete_=True`` replaces the inherited block instead of
being merged into it (MMEngine's rule).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slimkit.errors import ConfigError, MissingPackageError

BASE_KEY = "_base_"
DELETE_KEY = "_delete_"


def _read(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"Config file {path} does not exist.")
    text = path.read_text()
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path} is not valid JSON: {exc}.") from exc
    elif path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as exc:
            raise MissingPackageError("YAML configs need PyYAML: pip install pyyaml (or use a .json config).") from exc
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path} is not valid YAML: {exc}.") from exc
    else:
        raise ConfigError(f"Config file {path} must end in .json, .yaml or .yml, got {path.suffix or 'no suffix'!r}.")
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping at the top, got {type(data).__name__}.")
    return data


def _strip(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _strip(v) for k, v in value.items() if k != DELETE_KEY}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def merge_configs(base: Mapping[str, Any], child: Mapping[str, Any]) -> dict[str, Any]:
    """``child`` merged into ``base`` recursively; a child block with ``_delete_=True`` replaces the base's."""
    merged = copy.deepcopy(dict(base))
    for key, value in child.items():
        if key == DELETE_KEY:
            continue
        if isinstance(value, Mapping) and not value.get(DELETE_KEY) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_configs(merged[key], value)
        else:
            merged[key] = _strip(value)
    return merged


def load_config(source: str | os.PathLike | Mapping[str, Any], _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The config in ``source`` (a dict, or a .json / .yaml file) with its ``_base_`` configs merged in."""
    if isinstance(source, Mapping):
        data, folder = copy.deepcopy(dict(source)), Path.cwd()
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source).resolve()
        if path in _seen:
            chain = " -> ".join(str(p) for p in (*_seen, path))
            raise ConfigError(f"_base_ configs form a cycle: {chain}.")
        data, folder, _seen = _read(path), path.parent, (*_seen, path)
    else:
        raise ConfigError(f"load_config takes a dict or a path to a .json/.yaml file, got {type(source).__name__}.")
    bases = data.pop(BASE_KEY, [])
    if isinstance(bases, (str, os.PathLike)):
        bases = [bases]
    if not isinstance(bases, list):
        raise ConfigError(f"{BASE_KEY} must be a path or a list of paths, got {bases!r}.")
    merged: dict[str, Any] = {}
    for base in bases:
        merged = merge_configs(merged, load_config(folder / base, _seen))
    return merge_configs(merged, data)
