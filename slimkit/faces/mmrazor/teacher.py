"""``teacher_ckpt``: the weights of a razor teacher from a saved model, without pickle.

A checkpoint is one of:

* a ``.safetensors`` file (a state dict, e.g. ``model.safetensors`` of any save);
* a slimkit save folder (``smash_config.json``, from ``SmashedModel.save_pretrained``): rebuilt with its
  algorithms replayed;
* a Hugging Face model folder (``config.json`` + safetensors weights);
* any other folder of ``*.safetensors`` files (e.g. one written by :func:`slimkit.faces.mmrazor.save_subnet`).

With a teacher architecture, the checkpoint's tensors load into it strictly: a missing or extra tensor, or one
of another shape, raises ConfigError naming the tensor and both shapes. Without one (``teacher=None``), a
slimkit or Hugging Face folder is the teacher itself.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from slimkit.engine.smashed_model import SmashedModel
from slimkit.errors import ConfigError, SaveLoadError, SlimkitError
from slimkit.zoo.sources import load_source

log = logging.getLogger(__name__)
FORMS = ("a .safetensors file, a slimkit save folder (smash_config.json), a Hugging Face model folder "
         "(config.json + safetensors) or a folder of .safetensors files")


def _model_in(folder: Path) -> nn.Module | None:
    """The model of a slimkit or Hugging Face folder (None for a plain folder of safetensors files)."""
    try:
        if (folder / "smash_config.json").is_file():
            return SmashedModel.from_pretrained(folder).model
        if (folder / "config.json").is_file():
            return load_source(folder).model
    except SlimkitError as exc:
        raise ConfigError(f"teacher_ckpt={str(folder)!r}: the saved model could not be loaded: {exc}") from exc
    return None


def _read(path: Path) -> dict[str, torch.Tensor]:
    files = [path] if path.is_file() else sorted(path.glob("*.safetensors"))
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            tensors.update(load_file(str(file)))
        except (SafetensorError, OSError, ValueError) as exc:
            raise SaveLoadError(f"teacher_ckpt: {file} is not a readable safetensors file ({exc}).") from exc
    return tensors


def checkpoint_tensors(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], nn.Module | None]:
    """(the state dict saved at ``path``, the saved model when ``path`` is a slimkit / Hugging Face folder)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ConfigError(f"teacher_ckpt={str(path)!r} does not exist. Give {FORMS}.")
    if path.is_file():
        if path.suffix != ".safetensors":
            raise ConfigError(f"teacher_ckpt={str(path)!r} is a {path.suffix or 'suffix-less'} file; slimkit reads "
                              f"no pickle (.pt / .pth / .bin). Give {FORMS}.")
        return _read(path), None
    model = _model_in(path)
    if model is not None:
        return model.state_dict(), model
    tensors = _read(path)
    if not tensors:
        found = sorted(p.name for p in path.iterdir())[:12]
        raise ConfigError(f"teacher_ckpt={str(path)!r} holds no smash_config.json, config.json or .safetensors file "
                          f"(found: {', '.join(found) or 'nothing'}). Give {FORMS}.")
    return tensors, None


def load_teacher_weights(teacher: nn.Module, path: str | os.PathLike) -> nn.Module:
    """Copy the tensors saved at ``path`` into ``teacher`` (strict: same names, same shapes); return it."""
    tensors, _ = checkpoint_tensors(path)
    expected = teacher.state_dict()
    where = f"teacher_ckpt={str(path)!r}"
    for name, tensor in tensors.items():
        if name in expected and tuple(tensor.shape) != tuple(expected[name].shape):
            raise ConfigError(f"{where}: tensor {name!r} has shape {tuple(tensor.shape)} in the checkpoint but "
                              f"{tuple(expected[name].shape)} in the teacher ({type(teacher).__name__}); give the "
                              "checkpoint of this architecture, or the architecture it was saved from.")
    missing = [n for n in expected if n not in tensors]
    extra = [n for n in tensors if n not in expected]
    if missing or extra:
        def names(items: list[str]) -> str:
            return ", ".join(repr(n) for n in items[:5]) + (f" and {len(items) - 5} more" if len(items) > 5 else "")
        parts = ([f"the teacher's {names(missing)} missing from it"] if missing else []) + (
            [f"{names(extra)} that the teacher does not have"] if extra else [])
        raise ConfigError(f"{where} does not fit the teacher ({type(teacher).__name__}): {'; '.join(parts)}. Give "
                          "the checkpoint saved from this architecture.")
    teacher.load_state_dict(tensors, strict=True)
    return teacher


def resolve_teacher(teacher: nn.Module | None, path: str | os.PathLike | None) -> nn.Module:
    """The teacher: ``teacher`` with the weights at ``path`` loaded, or the model saved at ``path``."""
    if path is None:
        if teacher is None:
            raise ConfigError("SingleTeacherDistill needs teacher= (a module or config dict) or teacher_ckpt= (a "
                              "saved model folder).")
        return teacher
    if teacher is not None:
        return load_teacher_weights(teacher, path)
    _, model = checkpoint_tensors(path)
    if model is None:
        raise ConfigError(f"teacher_ckpt={str(path)!r} holds weights only; pass teacher= (the architecture, a module "
                          "or config dict such as dict(type='ZooModel', name='digits_cnn', pretrained=False)) to "
                          "load them into.")
    return model


def load_pretrained(model: nn.Module, init_cfg: Mapping[str, Any]) -> None:
    """Load MMEngine's ``init_cfg=dict(type='Pretrained', checkpoint=..., prefix=...)`` into ``model`` by name."""
    checkpoint, prefix = init_cfg.get("checkpoint"), str(init_cfg.get("prefix", ""))
    if init_cfg.get("type") != "Pretrained" or checkpoint is None:
        raise ConfigError(f"init_cfg must be dict(type='Pretrained', checkpoint=<.safetensors file or saved folder>), "
                          f"got {dict(init_cfg)!r}.")
    text = str(checkpoint)
    if "://" in text or text.endswith((".pth", ".pt", ".bin", ".ckpt", ".pkl")):
        log.info("init_cfg checkpoint %r is not read (slimkit downloads nothing and reads no pickle): %s keeps its "
                 "own weights.", text, type(model).__name__)
        return
    tensors, _ = checkpoint_tensors(text)
    tensors = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    expected = model.state_dict()
    bad = [k for k, v in tensors.items() if k not in expected or tuple(v.shape) != tuple(expected[k].shape)]
    if bad or not tensors:
        raise ConfigError(f"init_cfg checkpoint {text!r} (prefix {prefix!r}) does not fit {type(model).__name__}: "
                          f"{len(bad)} tensor(s) it lacks or of another shape, e.g. {bad[:3]}; give the checkpoint "
                          "saved from this model (e.g. save_file(algorithm.state_dict(), ...)).")
    missing = [k for k in expected if k not in tensors]
    if missing:
        log.info("init_cfg checkpoint %r has no value for %d tensor(s) of %s (e.g. %s); they keep theirs.", text,
                 len(missing), type(model).__name__, missing[:3])
    model.load_state_dict(tensors, strict=False)
