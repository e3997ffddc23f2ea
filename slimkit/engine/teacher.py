"""``<algorithm>_teacher_ckpt``: a distillation teacher other than the model as it entered smash, loaded by path.

An algorithm that declares a ``teacher_ckpt`` hyperparameter (kd_recover, layer_drop, width_distill) distils
from the model it is handed unless that hyperparameter names a folder: a slimkit save (``smash_config.json``,
from ``SmashedModel.save_pretrained``; rebuilt with its algorithms replayed) or a Hugging Face model folder
(``config.json`` + weights). smash() loads it before applying anything, so a bad path fails at once, and hands it
to the algorithm as ``smash_config.teacher`` (frozen by the algorithm, in eval mode).
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from slimkit.core import registry
from slimkit.engine.smashed_model import SmashedModel
from slimkit.errors import ConfigError, SlimkitError
from slimkit.zoo.sources import load_source

#: the hyperparameter (un-prefixed) that names a teacher folder
TEACHER_KEY = "teacher_ckpt"
_FORMS = ("a slimkit save folder (smash_config.json, written by SmashedModel.save_pretrained) or a Hugging Face "
          "model folder (config.json + weights)")


def takes_teacher(name: str) -> bool:
    """Whether algorithm ``name`` has a ``teacher_ckpt`` hyperparameter."""
    return any(hp.name == TEACHER_KEY for hp in registry.get(name)().get_hyperparameters())


def load_teacher(path: str, key: str, device: str = "cpu") -> nn.Module:
    """The model saved in folder ``path`` (see the module doc), in eval mode on ``device``.

    ``key`` is the prefixed hyperparameter name, for messages. A missing folder, a folder of neither form, or
    a save that fails to load raises ConfigError naming the path and what it must hold.
    """
    folder = Path(path).expanduser()
    unset = f"leave cfg['{key}'] empty to distil from the model as it entered smash()"
    if not folder.is_dir():
        raise ConfigError(f"cfg['{key}'] = {path!r}: no such folder. Give {_FORMS}, or {unset}.")
    try:
        if (folder / "smash_config.json").is_file():
            model = SmashedModel.from_pretrained(folder).model
        elif (folder / "config.json").is_file():
            model = load_source(folder).model
        else:
            found = sorted(p.name for p in folder.iterdir())[:12]
            raise ConfigError(f"cfg['{key}'] = {path!r} holds neither smash_config.json nor config.json (found: "
                              f"{', '.join(found) or 'nothing'}). Give {_FORMS}, or {unset}.")
    except ConfigError:
        raise
    except SlimkitError as exc:
        raise ConfigError(f"cfg['{key}'] = {path!r}: the teacher could not be loaded: {exc}") from exc
    if not isinstance(model, nn.Module):
        raise ConfigError(f"cfg['{key}'] = {path!r} loaded a {type(model).__name__}, not a torch module.")
    return model.to(device).eval()
