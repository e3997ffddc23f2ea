"""The experiment engine: an experiment file's trials on an Optuna study, their jobs and the Pareto report.

``load_experiment(path, automatic)`` reads and checks an experiment file (Auptimizer's fields plus slimkit's
script-free form, and a training script's ``parameter_config`` hyperparameters, alone or with compression
ranges); ``run_experiment(path, automatic)`` runs it (``slimkit run``): one job, or a search on Optuna (with
Auptimizer's early-stopping policies as pruners) whose trials run scripts (which report with ``#Auto:`` result
lines, :func:`parse_result`) or smash and measure a model, with a measured Pareto front;
``report_experiment(folder)`` reprints a finished one. The calls a compression script makes
(``create_compressor``, ``BasicConfig``, ``print_result``, ``aup_args``) are
Auptimizer's face, :mod:`slimkit.faces.auptimizer`.
"""

import importlib
from typing import Any

from slimkit.experiment.compressors import CompressorSpec, available_compressors, get_compressor_spec
from slimkit.experiment.experiment_file import Experiment, load_experiment
from slimkit.experiment.result import ScriptResult, parse_result

__all__ = [
    "CompressorSpec",
    "Experiment",
    "ExperimentResult",
    "ScriptResult",
    "available_compressors",
    "get_compressor_spec",
    "load_experiment",
    "parse_result",
    "report_experiment",
    "run_experiment",
]

#: names that need Optuna (the ``experiment`` extra): imported on first use so ``import slimkit`` does not need it
_RUNNER_NAMES = {"ExperimentResult": "report", "report_experiment": "runner", "run_experiment": "runner"}


def __getattr__(name: str) -> Any:
    """Import the runner (and Optuna) the first time one of its names is used."""
    if name in _RUNNER_NAMES:
        module = importlib.import_module(f"slimkit.experiment.{_RUNNER_NAMES[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'slimkit.experiment' has no attribute {name!r}")
