"""A saved SmashConfig on disk: the JSON file, its header checks, and the files beside it.

Beside the JSON: example inputs as safetensors, tokenizer/processor folders.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from slimkit.core.devices import is_available
from slimkit.core.io import atomic_directory, save_tensors_atomic, write_json_atomic
from slimkit.errors import ConfigError

SCHEMA_VERSION = 1
CONFIG_FILE = "smash_config.json"
TOKENIZER_DIR = "tokenizer"
PROCESSOR_DIR = "processor"
EXAMPLE_INPUTS_FILE = "example_inputs.safetensors"


def check_payload(payload: Any) -> str:
    """Check a saved config's top level (object, schema version, field types); return the device to use."""
    if not isinstance(payload, Mapping):
        raise ConfigError(
            f"A saved SmashConfig is a JSON object with 'schema_version', 'algorithms' and 'hyperparameters'; "
            f"got a {type(payload).__name__} at the top level. Re-save the config with SmashConfig.save_to_json."
        )
    version = payload.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ConfigError(
            f"SmashConfig schema_version {version!r} is not supported (this slimkit reads {SCHEMA_VERSION}). "
            "Re-save the config with this slimkit version."
        )
    device = payload.get("device", "auto")
    if not isinstance(device, str):
        raise ConfigError(f"SmashConfig 'device' must be a string such as 'cpu' or 'cuda'; got {device!r}.")
    for field in ("algorithms", "hyperparameters"):
        if not isinstance(payload.get(field, {}), Mapping):
            raise ConfigError(f"SmashConfig {field!r} must be a JSON object of key -> value; got {payload[field]!r}.")
    return device if device == "auto" or is_available(device) else "cpu"  # saved on a GPU, loaded where there is none


def write_config(path: str | os.PathLike, payload: Mapping[str, Any], tokenizer: Any, processor: Any,
                 example_inputs: Any) -> Path:
    """Write ``payload`` as JSON with the tokenizer/processor folders and example inputs beside it.

    A ``path`` ending in ``.json`` is that file, anything else the folder of ``smash_config.json``. Returns the
    JSON file's path.
    """
    given = Path(path)
    folder, target = (given.parent, given) if given.suffix.lower() == ".json" else (given, given / CONFIG_FILE)
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(target, dict(payload))
    for obj, sub in ((tokenizer, TOKENIZER_DIR), (processor, PROCESSOR_DIR)):
        if obj is not None and hasattr(obj, "save_pretrained"):
            with atomic_directory(folder / sub, replace=True) as tmp:  # never half a tokenizer on disk
                obj.save_pretrained(str(tmp))
    if example_inputs is not None:
        save_inputs(example_inputs, folder / EXAMPLE_INPUTS_FILE)
    return target


def read_config(path: str | os.PathLike) -> tuple[Path, Any]:
    """The JSON file of a saved config (a directory or the file itself) and its parsed content."""
    p = Path(path)
    file = p / CONFIG_FILE if p.is_dir() else p
    if not file.is_file():
        raise ConfigError(f"No SmashConfig at {file}: the file does not exist.")
    try:
        return file, json.loads(file.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file} is not valid JSON ({exc}); the file is truncated or corrupt.") from exc


def save_inputs(inputs: Any, path: Path) -> None:
    """Store example inputs as safetensors; the key prefix records the form (kwargs, positional, single)."""
    if isinstance(inputs, torch.Tensor):
        tensors, kind = {"x": inputs}, "tensor"
    elif isinstance(inputs, Mapping):
        tensors, kind = dict(inputs), "kwargs"
    else:
        tensors, kind = {str(i): t for i, t in enumerate(inputs)}, "args"
    save_tensors_atomic(tensors, path, metadata={"kind": kind})


def load_inputs(path: Path) -> Any:
    """Read example inputs written by ``save_to_json`` back in their original form."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        kind = (fh.metadata() or {}).get("kind", "kwargs")
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    if kind == "tensor":
        return tensors["x"]
    if kind == "args":
        return tuple(tensors[str(i)] for i in range(len(tensors)))
    return tensors


def load_pretrained(auto_class: str, source: str | os.PathLike, what: str) -> Any:
    """``transformers.<auto_class>.from_pretrained(source)`` for a local folder, or a ConfigError saying why not."""
    import transformers

    try:
        return getattr(transformers, auto_class).from_pretrained(str(source))
    except Exception as exc:
        raise ConfigError(
            f"Could not load a {what} from {str(source)!r}: {exc.__class__.__name__}. A hub id needs network "
            f"access, which slimkit never assumes; pass a local folder or an already-loaded {what} object."
        ) from exc
