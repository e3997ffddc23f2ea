"""Reading an experiment's (or a job's) settings file: JSON, or YAML when PyYAML is installed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from slimkit.errors import ConfigError


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
