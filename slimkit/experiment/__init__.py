"""Auptimizer-shaped compression experiments: the calls a compression script makes.

``create_compressor(model, config, optimizer=...)`` builds the compressor an experiment config names;
``.compress()``, ``.apply_speedup(dummy_input)`` and ``.export_model(...)`` run the job; ``print_result(metric)``
reports the script's metric to the runner as a ``#Auto: result=...`` line.
"""

from slimkit.experiment.compression_config import CompressionSettings, parse_compression_config
from slimkit.experiment.compressor import Compressor, create_compressor
from slimkit.experiment.compressors import (
    CompressorSpec,
    available_compressors,
    get_compressor_spec,
)
from slimkit.experiment.export import load_compressed_model, read_kept_channels
from slimkit.experiment.result import ScriptResult, parse_result, print_result

__all__ = [
    "CompressionSettings",
    "Compressor",
    "CompressorSpec",
    "ScriptResult",
    "available_compressors",
    "create_compressor",
    "get_compressor_spec",
    "load_compressed_model",
    "parse_compression_config",
    "parse_result",
    "print_result",
    "read_kept_channels",
]
