"""Pruna's face: its names for slimkit's objects (``SmashConfig`` answers Pruna's calls itself, in the config layer).

``PrunaModel`` is :class:`~slimkit.engine.SmashedModel` (``PrunaModel.from_pretrained(path)``);
``PrunaDataModule`` is a :class:`~slimkit.data.DataModule` taking Pruna's argument names.
"""

from slimkit.engine import SmashedModel
from slimkit.faces.pruna.datamodule import PrunaDataModule

PrunaModel = SmashedModel  # Pruna's name for a smashed model: PrunaModel.from_pretrained(path)

__all__ = ["PrunaDataModule", "PrunaModel"]
