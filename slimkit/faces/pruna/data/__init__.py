"""Pruna's ``pruna.data`` import path: ``from slimkit.faces.pruna.data.pruna_datamodule import PrunaDataModule``."""

from slimkit.faces.pruna.data.pruna_datamodule import PrunaDataModule

__all__ = ["PrunaDataModule"]
