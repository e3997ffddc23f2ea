"""onnxruntime: export the model to ONNX and run it with ONNX Runtime (optionally its dynamic int8)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from ConfigSpace import CategoricalHyperparameter, UniformIntegerHyperparameter

from slimkit.core.contract import SaveFn, SlimkitCompiler, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean
from slimkit.core.registry import register
from slimkit.engines.onnx import LEVELS, OnnxRuntimeModule, compile_onnx, open_saved, save_files
from slimkit.engines.quantization.int8.calibration import example_inputs
from slimkit.errors import MissingPackageError


@register
class OnnxRuntime(SlimkitCompiler):
    """Export to ONNX and run with ONNX Runtime's CPU engine, optionally with its dynamic int8 MatMuls.

    The smashed model is an ``nn.Module`` around an ``InferenceSession`` that takes the original forward's
    arguments and returns torch tensors. Needs example inputs: ``cfg.add_data`` batches, or a zoo model's own
    inputs. Saving writes the ONNX file that runs (``model.onnx``, or ``model.int8.onnx`` with int8, plus any
    external-data files) and ``smash_config.json``, no torch weights; loading opens that file directly, so it
    needs neither the original model nor another export, and every earlier algorithm (e.g. a pruner) is already
    in the graph. A dict or transformers ``ModelOutput`` result keeps its type after reload; other output
    types come back as a tuple.
    """

    algorithm_name = "onnxruntime"
    references = {"ONNX Runtime": "https://onnxruntime.ai/docs/",
                  "Quantization": "https://onnxruntime.ai/docs/performance/model-optimizations/quantization.html"}
    run_on_cpu = True
    run_on_cuda = False
    save_fn = SaveFn.ARTIFACTS
    extra = "onnx"
    compatible_algorithms = {"quantizer": [], "batcher": []}

    def get_hyperparameters(self) -> list:
        """Quantization, threads, exporter, graph optimisation."""
        return [
            CategoricalHyperparameter("quantize", ["none", "int8_dynamic"], default_value="none", meta={
                "desc": "'int8_dynamic': ONNX Runtime's dynamic int8 (int8 weights, activations per call)."}),
            Boolean("per_channel", True, meta={"desc": "Per-output-channel int8 weight scales (more accurate)."}),
            Boolean("reduce_range", False, meta={"desc": "7-bit weights, for CPUs whose int8 kernels saturate."}),
            UniformIntegerHyperparameter("threads", 0, 1024, default_value=0, meta={
                "desc": "ONNX Runtime intra-op threads; 0 uses torch's current thread count."}),
            CategoricalHyperparameter("exporter", ["torchscript", "dynamo"], default_value="torchscript", meta={
                "desc": "torch.onnx exporter: 'torchscript' (tracing, fast) or 'dynamo' (torch.export, slower)."}),
            CategoricalHyperparameter("optimization", list(LEVELS), default_value="all", meta={
                "desc": "ONNX Runtime graph optimisation level."}),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """Any float nn.Module without torch.ao quantized modules (those do not export to ONNX)."""
        return isinstance(model, torch.nn.Module) and not any(
            ".quantized" in type(m).__module__ for m in model.modules())

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return "It exports float torch modules to ONNX; torch.ao-quantized modules do not export."

    def import_algorithm_packages(self) -> dict[str, Any]:
        """Import onnx and onnxruntime (pip install 'slimkit[onnx]')."""
        import onnx
        import onnxruntime

        return {"onnx": onnx, "onnxruntime": onnxruntime}

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        model.eval()
        inputs = example_inputs(model, example=smash_config.example_inputs, data=smash_config.data,
                                purpose="onnxruntime")
        module, record = compile_onnx(
            model, inputs, exporter=smash_config["exporter"], int8=smash_config["quantize"] == "int8_dynamic",
            per_channel=smash_config["per_channel"], reduce_range=smash_config["reduce_range"],
            threads=smash_config["threads"], optimization=smash_config["optimization"])
        smash_config.state.update(record)
        return module

    def save_artifacts(self, model: Any, directory: Path, state: dict[str, Any]) -> None:
        """Copy the ONNX file the session runs (and its external-data files) into ``directory``."""
        save_files(model, directory, state)

    def load_artifacts(self, directory: Path, smash_config: SmashConfigPrefixWrapper,
                       state: dict[str, Any]) -> OnnxRuntimeModule:
        """Open the saved ONNX file in a new session; the save directory is read, never deleted."""
        try:
            self.import_algorithm_packages()
        except ImportError as exc:
            raise MissingPackageError(f"Loading an onnxruntime save needs onnx and onnxruntime ({exc}). Install "
                                      "them: pip install 'slimkit[onnx]'") from exc
        return open_saved(directory, state, smash_config["threads"], smash_config["optimization"])
