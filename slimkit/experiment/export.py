"""Files a compression experiment writes, and loading them back (safetensors + JSON, never pickle).

``Compressor.export_model`` writes, atomically:

* ``model_path``: the model's weights as safetensors. Without speedup they are the masked weights of the
  original architecture; after speedup, the shrunk model's state dict.
* ``mask_path`` (optional): the pruning masks (``<layer>.weight_mask`` / ``<layer>.bias_mask``).
* after speedup, the kept-channel record as JSON (by default ``<model_path without suffix>.kept_channels.json``):
  ``{layer: {"out": [...], "in": [...]}}``, what :func:`slimkit.compression.speedup.apply_kept_channels` replays.

:func:`load_compressed_model` rebuilds a saved model from a fresh base model of the same architecture.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from slimkit.compression.speedup import apply_kept_channels
from slimkit.errors import SaveLoadError

SPEEDUP_MODEL_FORMAT = "slimkit-speedup-state-dict"
KEPT_CHANNELS_SUFFIX = ".kept_channels.json"


def place(path: str | os.PathLike, folder_name: str | os.PathLike | None) -> Path:
    """``folder_name/path`` when a folder is given (an absolute ``path`` stays as it is)."""
    return Path(folder_name) / Path(path) if folder_name is not None else Path(path)


def default_kept_channels_path(model_path: str | os.PathLike) -> Path:
    """``model.safetensors`` -> ``model.kept_channels.json`` (beside the weights)."""
    path = Path(model_path)
    return path.with_name(path.stem + KEPT_CHANNELS_SUFFIX) if path.suffix else path.with_name(
        path.name + KEPT_CHANNELS_SUFFIX)


def write_json_atomic(data: Any, path: str | os.PathLike) -> Path:
    """Write ``data`` as indented JSON through a temp file + ``os.replace``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=1, sort_keys=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return target


def read_kept_channels(path: str | os.PathLike) -> dict[str, Any]:
    """Read a kept-channel record written by ``export_model(..., speedup=True)``."""
    if not Path(path).is_file():
        raise SaveLoadError(f"Kept-channel record {str(path)!r} does not exist; export_model(speedup=True) writes "
                            "it beside the model file as '<name>.kept_channels.json'.")
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SaveLoadError(f"Kept-channel record {str(path)!r} is not readable JSON ({exc}).") from exc
    if not isinstance(record, Mapping):
        raise SaveLoadError(f"Kept-channel record {str(path)!r} must hold a JSON object of layer -> channels.")
    return dict(record)


def load_compressed_model(model: nn.Module, model_path: str | os.PathLike,
                          kept_channels_path: str | os.PathLike | None = None) -> nn.Module:
    """Load exported weights into ``model`` (a freshly built base model), shrinking it first when needed.

    With ``kept_channels_path`` (or when the default record beside ``model_path`` exists) the recorded
    shrink is replayed with ``apply_kept_channels``; then the weights load strictly. Returns ``model``.
    """
    if not isinstance(model, nn.Module):
        raise SaveLoadError(f"load_compressed_model needs the base torch.nn.Module to load into; got "
                            f"{type(model).__name__}.")
    if not Path(model_path).is_file():
        raise SaveLoadError(f"Model file {str(model_path)!r} does not exist; pass the model_path export_model wrote.")
    try:
        state = load_file(str(model_path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise SaveLoadError(f"Model file {str(model_path)!r} is not a readable safetensors file ({exc}).") from exc
    record_path = kept_channels_path
    if record_path is None and default_kept_channels_path(model_path).is_file():
        record_path = default_kept_channels_path(model_path)
    if record_path is not None:
        apply_kept_channels(model, read_kept_channels(record_path))
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise SaveLoadError(f"The weights in {str(model_path)!r} do not fit this model ({exc}). Build the same base "
                            "architecture the compressed model came from (and pass its kept-channel record if it "
                            "was sped up).") from exc
    return model
