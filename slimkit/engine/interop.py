"""Save a SmashedModel as another tool's checkpoint (compressed-tensors, GPTQ), and open theirs as a SmashedModel.

Export (:func:`save_checkpoint`) refuses, before anything is written, a recipe or model that the format cannot
hold (the format object's ``check_recipe`` for what a SmashConfig will produce, ``check_model`` for the model
itself; :mod:`slimkit.formats` holds the formats). Import (:func:`import_checkpoint`) rebuilds the architecture
from ``config.json`` on the meta device and puts the checkpoint's codes, scales and zero points into
:class:`PackedLinear` layers: nothing is re-quantized or dequantized, and the result runs on slimkit's CPU kernel,
saves in slimkit's format, serves, and compiles to GGUF where the grid has a GGUF twin.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from slimkit.config.files import CONFIG_FILE
from slimkit.config.smash_config import SmashConfig
from slimkit.core import registry
from slimkit.engine.base_model import describe_base, meta_parameters, meta_tensors
from slimkit.engine.model_card import build_card
from slimkit.errors import SaveLoadError
from slimkit.formats import FormatError, export_format, get_format, read_quantization_config
from slimkit.formats.reader import load_into
from slimkit.zoo.sources import has_tokenizer


def _check_applied(smashed: Any, fmt: str) -> None:
    others = [a["name"] for a in smashed.applied if registry.get(a["name"]).produces is None]
    if others:
        raise FormatError(f"Cannot save as {fmt}: {', '.join(others)} ran on this model, and {fmt} stores an "
                          "unchanged transformers architecture whose Linear layers are packed by a low-bit "
                          f"quantizer. Smash with only one to export. {export_format(fmt).holds()}")


def check_target(path: str | os.PathLike, exports: bool = True) -> Path:
    """Refuse to overwrite a folder that is neither empty nor an earlier slimkit save (or, with ``exports``, export)."""
    target = Path(path)
    if target.exists() and (not target.is_dir() or (any(target.iterdir()) and not (
            (target / CONFIG_FILE).exists() or (exports and "slimkit" in _read(target / "README.md"))))):
        raise SaveLoadError(f"Refusing to save into {target}: it exists and is not an earlier slimkit save, so its "
                            "files would be lost. Choose a new or empty directory.")
    return target


def _read(file: Path) -> str:
    try:
        return file.read_text()[:2000]
    except (OSError, UnicodeDecodeError):
        return ""


def save_checkpoint(smashed: Any, path: str | os.PathLike, fmt: str,
                    measurements: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``smashed`` to ``path`` as a ``fmt`` checkpoint with its tokenizer and model card; checks first."""
    checkpoint_format = export_format(fmt)
    _check_applied(smashed, fmt)
    target = check_target(path)
    checkpoint_format.check_model(smashed.model, smashed.smash_config)  # refuses before the card or any file
    card = build_card(smashed, fmt, measurements)
    return checkpoint_format.export(smashed.model, target, smashed.smash_config, smashed.smash_config.tokenizer, card)


def foreign_format(path: str | os.PathLike) -> str | None:
    """The format of a folder made by another tool (config.json with a quantization_config, no slimkit record).

    ``None`` for slimkit saves and folders without a quantization_config; unknown methods raise a FormatError.
    """
    folder = Path(path)
    if not folder.is_dir() or (folder / CONFIG_FILE).is_file() or not (folder / "config.json").is_file():
        return None
    fmt, _ = read_quantization_config(folder)
    return fmt


def _hf_config(folder: Path) -> tuple[Any, type]:
    import transformers

    data = json.loads((folder / "config.json").read_text())
    data.pop("quantization_config", None)
    model_type = data.get("model_type")
    arch = (data.get("architectures") or [None])[0]
    cls = getattr(transformers, str(arch), None) if arch else None
    if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)):
        raise FormatError(f"{folder}/config.json names architecture {arch!r}, which this transformers has no model "
                          "class for; set 'architectures' to a transformers causal LM class.")
    try:
        config = transformers.AutoConfig.for_model(model_type, **{k: v for k, v in data.items() if k != "model_type"})
    except Exception as exc:  # noqa: BLE001 - transformers raises many types for a bad config
        raise FormatError(f"{folder}/config.json is not a config transformers can build ({exc}).") from exc
    return config, cls


def import_checkpoint(path: str | os.PathLike, device: str | None = None) -> tuple:
    """Open another tool's compressed-tensors or GPTQ folder as SmashedModel parts (see the module doc)."""
    folder = Path(path)
    fmt, qc = read_quantization_config(folder)
    if fmt is None:
        raise SaveLoadError(f"{folder} has no quantization_config: it is a plain Hugging Face folder, not a slimkit "
                            "save. Smash it with `slimkit smash --model DIR` or load it with transformers.")
    config, cls = _hf_config(folder)
    with meta_parameters():
        model = cls(config)
    info = load_into(model, folder, get_format(fmt), qc, torch.float32)
    missing = meta_tensors(model)
    if missing:
        raise FormatError(f"{folder}: {len(missing)} tensor(s) of {cls.__name__} are not in the checkpoint: "
                          f"{', '.join(missing[:6])}.")
    cfg = SmashConfig(device=device or "cpu")
    if has_tokenizer(folder):
        cfg.add_tokenizer(str(folder))
    model = model.to(cfg.device).eval()
    base = describe_base(model)
    base["source"] = {"format": fmt, "path": str(folder.resolve()), "schemes": sorted(set(info["schemes"].values())),
                      "quantization_config": qc}
    return model, cfg, [], base, None, None


__all__ = ["check_target", "foreign_format", "import_checkpoint", "save_checkpoint"]
