"""Pruna's face: its names for slimkit's objects (``SmashConfig`` answers Pruna's calls itself, in the config layer).

``PrunaModel`` is :class:`~slimkit.engine.SmashedModel` (``PrunaModel.from_pretrained(path)``);
``PrunaDataModule`` is a :class:`~slimkit.data.DataModule` taking Pruna's argument names.
``Task`` and ``EvaluationAgent`` are Pruna's evaluation (:mod:`slimkit.faces.pruna.evaluation`, laid out like
``pruna.evaluation``: ``from slimkit.faces.pruna.evaluation.task import Task``).
"""

from slimkit.engine import SmashedModel
from slimkit.faces.pruna.datamodule import PrunaDataModule
from slimkit.faces.pruna.evaluation import EvaluationAgent, Task

PrunaModel = SmashedModel  # Pruna's name for a smashed model: PrunaModel.from_pretrained(path)

__all__ = ["EvaluationAgent", "PrunaDataModule", "PrunaModel", "Task"]
