"""Pruna's ``pruna.data.pruna_datamodule`` module path, re-exporting :class:`~slimkit.faces.pruna.PrunaDataModule`."""

from slimkit.faces.pruna.datamodule import PrunaDataModule

__all__ = ["PrunaDataModule"]
