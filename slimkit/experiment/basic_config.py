"""``BasicConfig``: the job configuration a compression script receives, a dict with attribute access.

A script started by ``slimkit run`` gets the path of its job config (JSON) as its first argument::

    config = slimkit.BasicConfig().load(sys.argv[1])
    compressor = slimkit.create_compressor(model, config)
    config.folder_name, config["config_list"]          # both spellings work

YAML files load too when PyYAML is installed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from slimkit.core.io import write_json_atomic
from slimkit.errors import ConfigError


class BasicConfig(dict):
    """A ``dict`` whose keys are also attributes (``config.config_list is config["config_list"]``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"The config has no {name!r}; its keys: {', '.join(map(str, self)) or '(none)'}."
                                 ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise AttributeError(name) from None

    def load(self, path: str | os.PathLike) -> BasicConfig:
        """Read a JSON (or YAML) mapping from ``path`` into this config and return it."""
        self.update(read_mapping(path, "config"))
        return self

    def save(self, path: str | os.PathLike) -> Path:
        """Write this config to ``path`` as JSON (atomically) and return the path."""
        return write_json_atomic(path, dict(self))


def read_mapping(path: str | os.PathLike, what: str) -> dict[str, Any]:
    """A JSON (``.json``) or YAML (``.yaml``/``.yml``) file that must hold one mapping; clear errors otherwise."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"The {what} file {str(file)!r} does not exist; give the path of a JSON file.")
    try:
        text = file.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{file} is not UTF-8 text ({exc}); save the {what} file as UTF-8 JSON or YAML.") from exc
    if file.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as exc:
            raise ConfigError(f"{file} is YAML but PyYAML is not installed; `pip install pyyaml` or write JSON."
                              ) from exc
        try:
            payload = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{file} is not valid YAML: {exc}") from exc
    else:
        try:
            payload = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{file} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno} "
                              "(JSON writes true/false/null in lower case and quotes keys with \").") from exc
    if not isinstance(payload, dict):
        raise ConfigError(f"{file} must hold one object {{...}} of settings; got {type(payload).__name__}.")
    return payload
