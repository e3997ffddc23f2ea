"""Auptimizer-shaped compression experiments: the calls a compression script makes.

``create_compressor(model, config, optimizer=...)`` builds the compressor an experiment config names;
``.compress()``, ``.apply_speedup(dummy_input)`` and ``.export_model(...)`` run the job; ``print_result(metric)``
reports the script's metric (or a list, one per objective) to the runner as a ``#Auto: result=...`` line;
``@aup_args`` fills a main function's arguments from the job config. ``run_experiment(path, automatic)``
runs an experiment file (``slimkit run``): one job, or a search on Optuna with a measured Pareto front.
"""

import importlib
from typing import Any

from slimkit.core import faces
from slimkit.experiment.aup_args import aup_args, aup_save_model
from slimkit.experiment.basic_config import BasicConfig
from slimkit.experiment.compression_config import CompressionSettings, parse_compression_config
from slimkit.experiment.compressor import Compressor, create_compressor
from slimkit.experiment.compressors import (
    CompressorSpec,
    available_compressors,
    get_compressor_spec,
)
from slimkit.experiment.experiment_file import Experiment, load_experiment
from slimkit.experiment.export import load_compressed_model, read_kept_channels
from slimkit.experiment.result import ScriptResult, parse_result, print_result

__all__ = [
    "BasicConfig",
    "CompressionSettings",
    "Compressor",
    "CompressorSpec",
    "Experiment",
    "ExperimentResult",
    "ScriptResult",
    "aup_args",
    "aup_save_model",
    "available_compressors",
    "create_compressor",
    "get_compressor_spec",
    "load_compressed_model",
    "load_experiment",
    "parse_compression_config",
    "parse_result",
    "print_result",
    "read_kept_channels",
    "report_experiment",
    "run_experiment",
]

faces.provide("create_compressor", create_compressor)  # Auptimizer's aup.compression.create_compressor

#: names that need Optuna (the ``experiment`` extra): imported on first use so ``import slimkit`` does not need it
_RUNNER_NAMES = {"ExperimentResult": "report", "report_experiment": "runner", "run_experiment": "runner"}


def __getattr__(name: str) -> Any:
    """Import the runner (and Optuna) the first time one of its names is used."""
    if name in _RUNNER_NAMES:
        module = importlib.import_module(f"slimkit.experiment.{_RUNNER_NAMES[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'slimkit.experiment' has no attribute {name!r}")
