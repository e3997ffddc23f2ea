"""Config files for the razor face: dicts, JSON, YAML and MMEngine-style ``.py`` files, with ``_base_``.

``_base_`` (a path or a list of paths, relative to the file) names configs to start from; the file's own keys
are merged into them recursively. A block with ``_delete_=True`` replaces the inherited block instead of
being merged into it (MMEngine's rule).

``.py`` configs (MMRazor's) are read as MMEngine reads them, except that slimkit never runs them: see
:mod:`slimkit.faces.mmrazor.pyeval` for the subset of Python a config may use and the imports it may make. What MMEngine
does and slimkit does too: ``_base_`` files may not define the same key twice; the file sees the merged bases
as ``_base_`` (``_base_.model``, ``{{_base_.model}}``, ``_base_.model.neck = ...``); dicts read and write their
keys as attributes (:class:`ConfigDict`); ``{{fileDirname}}``-style variables are substituted.

Scoped bases (``'mmcls::_base_/datasets/imagenet_bs32.py'``) name files of other MMEngine-based packages: datasets,
schedules and models that you supply yourself in slimkit (your batches, your ``architecture=`` / ``teacher=``).
They are skipped with a logged note, and whatever the config reads from them (``_base_.model``) becomes a
:class:`SkippedBase` placeholder that says where it came from if it is ever built. ``mmrazor::`` bases are
looked up in the folders above the config (MMRazor's ``configs/`` tree); ``scope_roots={"mmdet": folder}``
points any scope at a folder of config files to read instead of skipping.
"""

from __future__ import annotations

import ast
import copy
import json
import logging
import os
import re
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slimkit.errors import ConfigError, MissingPackageError, closest
from slimkit.faces.mmrazor.pyeval import ConfigEvaluator, literal_bases
from slimkit.faces.mmrazor.skipped import SkippedBase

BASE_KEY = "_base_"
DELETE_KEY = "_delete_"
log = logging.getLogger(__name__)


class ConfigDict(dict):
    """A dict whose keys also read and write as attributes (``cfg.model.distiller``), like MMEngine's."""

    def __getattr__(self, name: str) -> Any:
        """The value of key ``name`` (AttributeError naming the closest keys when there is none)."""
        if name.startswith("__") or name not in self:
            raise AttributeError(f"config has no key {name!r}.{closest(name, [str(k) for k in self])} Keys: "
                                 f"{', '.join(map(str, self)) or 'none'}.")
        return self[name]

    def __setattr__(self, name: str, value: Any) -> None:
        """Set key ``name``."""
        self[name] = value

    def __delattr__(self, name: str) -> None:
        """Delete key ``name``."""
        del self[name]

    def __deepcopy__(self, memo: dict[int, Any]) -> ConfigDict:
        """A deep copy (of the same class)."""
        out = type(self)()
        memo[id(self)] = out
        for key, value in self.items():
            out[copy.deepcopy(key, memo)] = copy.deepcopy(value, memo)
        return out


class _BaseNamespace(ConfigDict):
    """``_base_`` inside a .py config: the merged bases, plus the names of the bases that were skipped."""


def _attr_get(obj: Any, name: Any) -> Any:
    if isinstance(obj, SkippedBase):
        return obj.child(str(name))
    if isinstance(obj, Mapping):
        if name in obj:
            return obj[name]
        skipped = getattr(obj, "_skipped_bases", ()) if isinstance(obj, _BaseNamespace) else ()
        if skipped:
            return SkippedBase(tuple(skipped), str(name))
        keys = [str(k) for k in obj]
        raise ConfigError(f"no key {name!r} here.{closest(str(name), keys)} Keys: {', '.join(keys) or 'none'}.")
    raise ConfigError(f"cannot read {name!r} of a {type(obj).__name__} in a config.")


def _attr_set(obj: Any, name: str, value: Any) -> None:
    if isinstance(obj, SkippedBase):
        log.debug("ignored %s.%s = ...: it belongs to a skipped base", obj.path, name)
        return
    if not isinstance(obj, dict):
        raise ConfigError(f"cannot set {name!r} on a {type(obj).__name__} in a config.")
    obj[name] = value


def to_config(value: Any) -> Any:
    """``value`` with every nested dict turned into a :class:`ConfigDict`."""
    if isinstance(value, Mapping) and not isinstance(value, SkippedBase):
        return ConfigDict({k: to_config(v) for k, v in value.items()})
    if isinstance(value, list):
        return [to_config(v) for v in value]
    if isinstance(value, tuple):
        return tuple(to_config(v) for v in value)
    return value


def _strip(value: Any) -> Any:
    if isinstance(value, Mapping):
        return ConfigDict({k: _strip(v) for k, v in value.items() if k != DELETE_KEY})
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def merge_configs(base: Mapping[str, Any], child: Mapping[str, Any]) -> ConfigDict:
    """``child`` merged into ``base`` recursively; a child block with ``_delete_=True`` replaces the base's."""
    merged = ConfigDict(copy.deepcopy(dict(base)))
    for key, value in child.items():
        if key == DELETE_KEY:
            continue
        if isinstance(value, Mapping) and not value.get(DELETE_KEY) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_configs(merged[key], value)
        else:
            merged[key] = _strip(value)
    return merged


def _read(path: Path) -> dict[str, Any]:
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
        raise ConfigError(f"Config file {path} must end in .py, .json, .yaml or .yml, got "
                          f"{path.suffix or 'no suffix'!r}.")
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping at the top, got {type(data).__name__}.")
    return data


class _Loader:
    """One load_config call: the scope roots, the files being read (cycle check) and the skipped bases."""

    def __init__(self, scope_roots: Mapping[str, str | os.PathLike] | None) -> None:
        self.scope_roots = {k: Path(v) for k, v in (scope_roots or {}).items()}
        self.skipped: list[str] = []

    def resolve(self, base: str, folder: Path) -> Path | None:
        """The file a ``_base_`` entry names, or None when it belongs to a package slimkit skips."""
        if "::" not in base:
            return folder / base
        scope, rel = base.split("::", 1)
        if scope in self.scope_roots:
            return self.scope_roots[scope] / rel
        if scope == "mmrazor":
            for ancestor in (folder, *folder.parents):
                if (ancestor / rel).is_file():
                    return ancestor / rel
        return None

    def bases(self, entries: list[str], folder: Path, seen: tuple[Path, ...], strict: bool) -> _BaseNamespace:
        merged = _BaseNamespace()
        object.__setattr__(merged, "_skipped_bases", [])
        for entry in entries:
            if not str(entry).strip():
                raise ConfigError(f"A _base_ entry of {folder} is empty; name a config file (this is a template "
                                  "whose _base_ you fill in).")
            path = self.resolve(str(entry), folder)
            if path is None:
                self.skipped.append(str(entry))
                merged._skipped_bases.append(str(entry))
                continue
            sub = self.load(path, seen)
            duplicate = sorted(set(merged) & set(sub)) if strict else []
            if duplicate:
                raise ConfigError(f"{entry!r} defines {duplicate}, which an earlier _base_ of {folder} defines too; "
                                  "MMEngine allows each key in one base only.")
            merged._skipped_bases.extend(getattr(sub, "_skipped_bases", []))
            for key, value in sub.items():
                merged[key] = merge_configs(merged[key], value) if (
                    isinstance(value, Mapping) and isinstance(merged.get(key), Mapping)) else value
        return merged

    def load(self, path: Path, seen: tuple[Path, ...]) -> ConfigDict:
        path = path.resolve()
        if path in seen:
            raise ConfigError(f"_base_ configs form a cycle: {' -> '.join(str(p) for p in (*seen, path))}.")
        if not path.is_file():
            where = f" (a _base_ of {seen[-1]})" if seen else ""
            raise ConfigError(f"Config file {path}{where} does not exist.")
        seen = (*seen, path)
        if path.suffix != ".py":
            data = _read(path)
            return _onto(self.bases(_pop_bases(data), path.parent, seen, strict=False), to_config(data))
        return self.load_py(path, seen)

    def load_py(self, path: Path, seen: tuple[Path, ...]) -> ConfigDict:
        text = _substitute(path, path.read_text(encoding="utf-8"))
        try:
            tree = ast.parse(text, filename=str(path))
        except SyntaxError as exc:
            raise ConfigError(f"{path}:{exc.lineno}: not valid Python ({exc.msg}).") from exc
        entries, body = literal_bases(tree, path)
        base = self.bases(entries, path.parent, seen, strict=True)
        names: dict[str, Any] = {BASE_KEY: base}
        ConfigEvaluator(names, path, _attr_get, _attr_set, ConfigDict).run(body)
        own = {k: v for k, v in names.items() if k != BASE_KEY and not k.startswith("__")
               and not isinstance(v, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType))}
        return _onto(base, to_config(own))


def _pop_bases(data: dict[str, Any]) -> list[str]:
    entries = data.pop(BASE_KEY, [])
    entries = [entries] if isinstance(entries, (str, os.PathLike)) else entries
    if not isinstance(entries, list):
        raise ConfigError(f"{BASE_KEY} must be a path or a list of paths, got {entries!r}.")
    return [str(e) for e in entries]


def _onto(base: _BaseNamespace, own: Mapping[str, Any]) -> ConfigDict:
    out = merge_configs(base, own)
    object.__setattr__(out, "_skipped_bases", base._skipped_bases)
    return out


def _substitute(path: Path, text: str) -> str:
    """MMEngine's text substitutions: ``{{fileDirname}}``-style variables and ``{{_base_.a.b}}`` references."""
    values = {"fileDirname": str(path.parent), "fileBasename": path.name,
              "fileBasenameNoExtension": path.stem, "fileExtname": path.suffix}
    for key, value in values.items():
        text = re.sub(r"\{\{\s*" + key + r"\s*\}\}", value.replace("\\", "/"), text)
    return re.sub(r"\{\{\s*(_base_\.[\w.]+)\s*\}\}", r"\1", text)


def load_config(source: str | os.PathLike | Mapping[str, Any],
                scope_roots: Mapping[str, str | os.PathLike] | None = None) -> ConfigDict:
    """The config in ``source`` (a dict, or a .py / .json / .yaml file) with its ``_base_`` configs merged in.

    Returns a :class:`ConfigDict` (``cfg.model`` or ``cfg["model"]``). Bases of other MMEngine-based packages are
    skipped with a logged note (see the module doc); :func:`skipped_bases` lists them.
    """
    loader = _Loader(scope_roots)
    if isinstance(source, Mapping):
        data = to_config(copy.deepcopy(dict(source)))
        out = merge_configs(loader.bases(_pop_bases(data), Path.cwd(), (), strict=False), data)
    elif isinstance(source, (str, os.PathLike)):
        out = loader.load(Path(source).expanduser(), ())
    else:
        raise ConfigError(f"load_config takes a dict or a path to a .py/.json/.yaml file, got {type(source).__name__}.")
    object.__setattr__(out, "_skipped_bases", list(dict.fromkeys(loader.skipped)))
    if loader.skipped:
        log.warning("Skipped %d base config(s) of other MMEngine-based packages: %s. slimkit does not read them: the "
                    "datasets, schedules and models they define come from you (your batches, architecture=..., "
                    "teacher=... when you build).", len(out._skipped_bases), ", ".join(out._skipped_bases))
    return out


def skipped_bases(cfg: Mapping[str, Any]) -> list[str]:
    """The base files :func:`load_config` skipped while reading ``cfg`` (``[]`` for a plain dict)."""
    return list(getattr(cfg, "_skipped_bases", []))
