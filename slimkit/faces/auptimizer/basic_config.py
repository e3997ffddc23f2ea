"""``BasicConfig``: the job configuration a compression script receives, a dict with attribute access.

A script started by ``slimkit run`` gets the path of its job config (JSON) as its first argument::

    config = slimkit.BasicConfig().load(sys.argv[1])
    compressor = slimkit.create_compressor(model, config)
    config.folder_name, config["config_list"]          # both spellings work

YAML files load too when PyYAML is installed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from slimkit.core.io import write_json_atomic
from slimkit.experiment.files import read_mapping


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
