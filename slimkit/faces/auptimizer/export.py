"""Files a compression experiment writes, and loading them back (safetensors + JSON, never pickle).

``Compressor.export_model`` writes, atomically:

* ``model_path``: the model's weights as safetensors. Without speedup they are the masked weights of the
  original architecture; after speedup, the shrunk model's state dict.
* ``mask_path`` (optional): the pruning masks (``<layer>.weight_mask`` / ``<layer>.bias_mask``).
* after speedup, the kept-channel record as JSON (by default ``<model_path without suffix>.kept_channels.json``):
  ``{layer: {"out": [...], "in": [...]}}``, what :func:`slimkit.engines.speedup.apply_kept_channels` replays.

:func:`load_compressed_model` rebuilds a saved model from a fresh base model of the same architecture.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from slimkit.engine import SmashedModel
from slimkit.engines.quantization import rebuild_quantized_layers
from slimkit.engines.speedup import apply_kept_channels
from slimkit.errors import SaveLoadError

SPEEDUP_MODEL_FORMAT = "slimkit-speedup-state-dict"
QUANTIZED_MODEL_FORMAT = "slimkit-frozen-quantized-state-dict"
KEPT_CHANNELS_SUFFIX = ".kept_channels.json"
QUANTIZED_LAYERS_SUFFIX = ".quantized_layers.json"


def place(path: str | os.PathLike, folder_name: str | os.PathLike | None) -> Path:
    """``folder_name/path`` when a folder is given (an absolute ``path`` stays as it is)."""
    return Path(folder_name) / Path(path) if folder_name is not None else Path(path)


def _beside(model_path: str | os.PathLike, suffix: str) -> Path:
    path = Path(model_path)
    return path.with_name((path.stem if path.suffix else path.name) + suffix)


def default_kept_channels_path(model_path: str | os.PathLike) -> Path:
    """``model.safetensors`` -> ``model.kept_channels.json`` (beside the weights)."""
    return _beside(model_path, KEPT_CHANNELS_SUFFIX)


def default_quantized_layers_path(model_path: str | os.PathLike) -> Path:
    """``model.safetensors`` -> ``model.quantized_layers.json``: the frozen quantized layers' specs."""
    return _beside(model_path, QUANTIZED_LAYERS_SUFFIX)


def _read_json_record(path: str | os.PathLike, what: str) -> dict[str, Any]:
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SaveLoadError(f"{what.capitalize()} record {str(path)!r} is not readable JSON ({exc}).") from exc
    if not isinstance(record, Mapping):
        raise SaveLoadError(f"{what.capitalize()} record {str(path)!r} must hold a JSON object keyed by layer name.")
    return dict(record)


def read_kept_channels(path: str | os.PathLike) -> dict[str, Any]:
    """Read a kept-channel record written by ``export_model(..., speedup=True)``."""
    if not Path(path).is_file():
        raise SaveLoadError(f"Kept-channel record {str(path)!r} does not exist; export_model(speedup=True) writes "
                            "it beside the model file as '<name>.kept_channels.json'.")
    return _read_json_record(path, "kept-channel")


def load_compressed_model(model: nn.Module, model_path: str | os.PathLike,
                          kept_channels_path: str | os.PathLike | None = None) -> nn.Module:
    """Load what ``export_model`` wrote into ``model`` (a freshly built base model of the same architecture).

    * a pruned model: with ``kept_channels_path`` (or when the default record beside ``model_path`` exists) the
      recorded shrink is replayed with ``apply_kept_channels``; then the weights load strictly;
    * a quantized model: the frozen layers recorded in ``<name>.quantized_layers.json`` are rebuilt, then the
      integer codes and scales load strictly;
    * a directory (an engine-less algorithm such as ``rtn`` exported a slimkit save): it is loaded with
      ``SmashedModel.from_pretrained(model_path, model=model)`` and the smashed model is returned.

    Returns the loaded model.
    """
    if not isinstance(model, nn.Module):
        raise SaveLoadError(f"load_compressed_model needs the base torch.nn.Module to load into; got "
                            f"{type(model).__name__}.")
    if Path(model_path).is_dir():
        return SmashedModel.from_pretrained(model_path, model=model)
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
    if default_quantized_layers_path(model_path).is_file():
        rebuild_quantized_layers(model, _read_json_record(default_quantized_layers_path(model_path), "quantized-layer"))
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise SaveLoadError(f"The weights in {str(model_path)!r} do not fit this model ({exc}). Build the same base "
                            "architecture the compressed model came from (and pass its kept-channel record if it "
                            "was sped up).") from exc
    return model
