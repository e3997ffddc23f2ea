"""onnxruntime: export the model to ONNX and run it with ONNX Runtime (optionally its dynamic int8)."""

from __future__ import annotations

import inspect
import logging
import os
import tempfile
import warnings
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from ConfigSpace import CategoricalHyperparameter, UniformIntegerHyperparameter

from slimkit.algorithms.base import SaveFn, SlimkitCompiler
from slimkit.algorithms.quantization._calibration import example_inputs
from slimkit.algorithms.registry import register
from slimkit.config.hyperparameters import Boolean
from slimkit.config.smash_config import SmashConfigPrefixWrapper
from slimkit.errors import ModelNotSupportedError
from slimkit.utils import Inputs

_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
           "all": "ORT_ENABLE_ALL"}


def _bind(signature: inspect.Signature, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        return dict(signature.bind(*args, **kwargs).arguments)
    except TypeError as exc:
        raise ModelNotSupportedError(f"The ONNX Runtime model takes the original forward's arguments {signature}: "
                                     f"{exc}.") from exc


def _split(inputs: Inputs) -> tuple[tuple, dict[str, Any]]:
    if isinstance(inputs, Mapping):
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    return (inputs,), {}


class OnnxRuntimeModule(torch.nn.Module):
    """An ``nn.Module`` whose forward runs an ONNX file in an ONNX Runtime ``InferenceSession`` (CPU).

    It takes the original model's forward arguments (positional or keyword; tensors go to the ONNX inputs of
    the same name) and returns torch tensors shaped like the original output: one tensor, a tuple, or the
    original ``ModelOutput``/dict type rebuilt from its keys.
    """

    def __init__(self, onnx_path: str | os.PathLike, signature: inspect.Signature, input_names: list[str],
                 output_keys: list[str] | None, output_type: type | None, threads: int, level: str) -> None:
        super().__init__()
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[level])
        self.onnx_path = str(onnx_path)
        self.session = ort.InferenceSession(self.onnx_path, options, providers=["CPUExecutionProvider"])
        self._signature = signature
        self.input_names = [i.name for i in self.session.get_inputs()]
        missing = [n for n in self.input_names if n not in input_names]
        if missing:
            raise ModelNotSupportedError(f"The exported ONNX graph expects inputs {missing} that the forward "
                                         f"signature {signature} does not name.")
        self._output_keys, self._output_type = output_keys, output_type

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the session on the tensors among the arguments; return torch tensors."""
        bound = _bind(self._signature, args, kwargs)
        absent = [n for n in self.input_names if not isinstance(bound.get(n), torch.Tensor)]
        if absent:
            raise ModelNotSupportedError(f"The ONNX model needs tensor inputs {self.input_names}; missing {absent}.")
        feeds = {n: bound[n].detach().cpu().contiguous().numpy() for n in self.input_names}
        outputs = [torch.from_numpy(o) for o in self.session.run(None, feeds)]
        if self._output_keys is not None and len(self._output_keys) == len(outputs):
            values = dict(zip(self._output_keys, outputs, strict=True))
            return self._output_type(**values) if self._output_type is not dict else values
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def extra_repr(self) -> str:
        """Show the ONNX file and inputs."""
        return f"onnx={self.onnx_path!r}, inputs={self.input_names}"


def _output_layout(output: Any) -> tuple[list[str] | None, type | None]:
    if isinstance(output, Mapping) and all(isinstance(v, torch.Tensor) for v in output.values()):
        return list(output.keys()), type(output)
    return None, None


def export_onnx(model: torch.nn.Module, inputs: Inputs, path: Path, exporter: str) -> tuple[inspect.Signature, list]:
    """Export ``model`` called on ``inputs`` to ``path`` with a dynamic batch axis (and sequence axis for tokens)."""
    signature = inspect.signature(model.forward)
    args, kwargs = _split(inputs)
    bound = _bind(signature, args, kwargs)
    names = [n for n, v in bound.items() if isinstance(v, torch.Tensor)]
    axes = {n: ({0: "batch", 1: "sequence"} if bound[n].dim() == 2 and not bound[n].is_floating_point()
                else {0: "batch"}) for n in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporters warn about deprecations and tracing on every call
        if exporter == "dynamo":
            dims = {"batch": torch.export.Dim.AUTO, "sequence": torch.export.Dim.AUTO}
            shapes = {n: {i: dims[a] for i, a in axes[n].items()} for n in names}
            torch.onnx.export(model, args, str(path), kwargs=kwargs, dynamo=True, dynamic_shapes=shapes,
                              external_data=False, verbose=False)
        else:
            torch.onnx.export(model, args, str(path), kwargs=kwargs, dynamo=False, input_names=names,
                              dynamic_axes=axes)
    return signature, names


@register
class OnnxRuntime(SlimkitCompiler):
    """Export to ONNX and run with ONNX Runtime's CPU engine, optionally with its dynamic int8 MatMuls.

    The smashed model is an ``nn.Module`` around an ``InferenceSession`` that takes the original forward's
    arguments and returns torch tensors. Saving keeps the torch model (before export); loading exports again
    (a few seconds for MiniLM). Needs example inputs: ``cfg.add_data`` batches, or a zoo model's own inputs.
    """

    algorithm_name = "onnxruntime"
    references = {"ONNX Runtime": "https://onnxruntime.ai/docs/",
                  "Quantization": "https://onnxruntime.ai/docs/performance/model-optimizations/quantization.html"}
    run_on_cpu = True
    run_on_cuda = False
    save_fn = SaveFn.SAVE_BEFORE_APPLY
    extra = "onnx"
    compatible_algorithms = {"quantizer": []}

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
            CategoricalHyperparameter("optimization", list(_LEVELS), default_value="all", meta={
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
        inputs = example_inputs(model, smash_config, purpose="onnxruntime")
        folder = Path(tempfile.mkdtemp(prefix="slimkit-onnx-"))
        path = folder / "model.onnx"
        signature, names = export_onnx(model, inputs, path, smash_config["exporter"])
        if smash_config["quantize"] == "int8_dynamic":
            from onnxruntime.quantization import QuantType, quantize_dynamic

            quantized = folder / "model.int8.onnx"
            previous = logging.root.manager.disable
            logging.disable(logging.WARNING)  # it asks for a pre-processing pass on every call
            try:
                quantize_dynamic(str(path), str(quantized), per_channel=smash_config["per_channel"],
                                 reduce_range=smash_config["reduce_range"], weight_type=QuantType.QInt8)
            finally:
                logging.disable(previous)
            path = quantized
        args, kwargs = _split(inputs)
        with torch.no_grad():
            keys, out_type = _output_layout(model(*args, **kwargs))
        threads = smash_config["threads"] or torch.get_num_threads()
        module = OnnxRuntimeModule(path, signature, names, keys, out_type, threads, smash_config["optimization"])
        weakref.finalize(module, _remove_tree, folder)
        smash_config.state.update(input_names=module.input_names, threads=threads, onnx_bytes=path.stat().st_size)
        return module


def _remove_tree(folder: Path) -> None:
    for item in sorted(folder.glob("*"), reverse=True):
        item.unlink(missing_ok=True)
    folder.rmdir()
