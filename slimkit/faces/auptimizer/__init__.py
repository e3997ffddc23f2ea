"""Auptimizer's face: the calls a compression script makes inside a job of ``slimkit run``.

``create_compressor(model, config, optimizer=...)`` builds the compressor the job config names;
``.compress()``, ``.apply_speedup(dummy_input)`` and ``.export_model(...)`` run the job and
``load_compressed_model`` reloads its export; ``BasicConfig`` is the job config (a dict with attribute access);
``print_result(metric)`` reports the script's metric (or a list, one per objective) to the runner as a
``#Auto: result=...`` line (called once per epoch, as Auptimizer's scripts do, each call is a step of the
learning curve early stopping reads, and the last is the result); ``@aup_args`` fills a main function's
arguments from the job config (a hyperparameter search's ``parameter_config`` values too). The experiment file,
the runner and the Optuna study are the engine's, :mod:`slimkit.experiment`.
"""

from slimkit.faces.auptimizer.aup_args import aup_args, aup_save_model
from slimkit.faces.auptimizer.basic_config import BasicConfig
from slimkit.faces.auptimizer.compression_config import CompressionSettings, parse_compression_config
from slimkit.faces.auptimizer.compressor import Compressor, create_compressor
from slimkit.faces.auptimizer.export import load_compressed_model, read_kept_channels
from slimkit.faces.auptimizer.result import print_result

__all__ = [
    "BasicConfig",
    "CompressionSettings",
    "Compressor",
    "aup_args",
    "aup_save_model",
    "create_compressor",
    "load_compressed_model",
    "parse_compression_config",
    "print_result",
    "read_kept_channels",
]
