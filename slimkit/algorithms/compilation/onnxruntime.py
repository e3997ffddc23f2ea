"""onnxruntime: export the model to ONNX and run it with ONNX Runtime (optionally its dynamic int8)."""

from __future__ import annotations

import inspect
import logging
import shutil
import tempfile
import warnings
import weakref
from pathlib import Path
from typing import Any

import torch
from ConfigSpace import CategoricalHyperparameter, UniformIntegerHyperparameter

from slimkit.algorithms.compilation._onnx_module import (  # re-exported: tests and users import them from here
    _LEVELS,
    OnnxRuntimeModule,
    _bind,
    _output_layout,
    _split,
    output_type_from_json,
    output_type_to_json,
    signature_from_json,
    signature_to_json,
)
from slimkit.algorithms.quantization._calibration import example_inputs
from slimkit.core.contract import SaveFn, SlimkitCompiler, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean
from slimkit.core.registry import register
from slimkit.errors import MissingPackageError, SaveLoadError
from slimkit.utils import Inputs


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
        weakref.finalize(module, _remove_tree, folder)  # the temp folder lives as long as the module
        smash_config.state.update(
            input_names=module.input_names, threads=threads, onnx_bytes=path.stat().st_size, onnx_file=path.name,
            external_data=_external_files(path), signature=signature_to_json(signature), output_keys=keys,
            output_type=output_type_to_json(out_type))
        return module

    def save_artifacts(self, model: Any, directory: Path, state: dict[str, Any]) -> None:
        """Copy the ONNX file the session runs (and its external-data files) into ``directory``."""
        if not isinstance(model, OnnxRuntimeModule):
            raise SaveLoadError(f"onnxruntime saves an OnnxRuntimeModule, got {type(model).__name__}.")
        source = Path(model.onnx_path)
        for name in [state["onnx_file"], *state["external_data"]]:
            try:
                shutil.copyfile(source.with_name(name), directory / _plain(name))
            except OSError as exc:
                raise SaveLoadError(f"Cannot copy {source.with_name(name)} into the save ({exc}). The ONNX file "
                                    "this model runs was removed: smash the original model again.") from exc

    def load_artifacts(self, directory: Path, smash_config: SmashConfigPrefixWrapper,
                       state: dict[str, Any]) -> OnnxRuntimeModule:
        """Open the saved ONNX file in a new session; the save directory is read, never deleted."""
        try:
            self.import_algorithm_packages()
        except ImportError as exc:
            raise MissingPackageError(f"Loading an onnxruntime save needs onnx and onnxruntime ({exc}). Install "
                                      "them: pip install 'slimkit[onnx]'") from exc
        try:
            files = [_plain(state["onnx_file"]), *map(_plain, state["external_data"])]
            signature = signature_from_json(state["signature"])
            out_type = output_type_from_json(state["output_type"])
            names, keys = list(state["input_names"]), state["output_keys"]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SaveLoadError(f"{directory / 'smash_config.json'}: the onnxruntime record is incomplete or "
                                f"invalid ({type(exc).__name__}: {exc}); it was saved by an older slimkit or "
                                "edited. Smash the original model again.") from exc
        for name in files:
            if not (directory / name).is_file():
                raise SaveLoadError(f"{directory / name} is missing: the save is incomplete. Copy the whole "
                                    "directory, or save the smashed model again.")
        threads = smash_config["threads"] or torch.get_num_threads()
        try:
            return OnnxRuntimeModule(directory / files[0], signature, names, keys if out_type else None, out_type,
                                     threads, smash_config["optimization"])
        except Exception as exc:
            raise SaveLoadError(f"ONNX Runtime cannot load {directory / files[0]} ({str(exc)[:300]}): the file is "
                                "truncated or corrupt. Save the smashed model again, or smash the original "
                                "model again.") from exc


def _plain(name: str) -> str:
    """``name`` when it is a bare file name (no folder part), so saves never read or write outside their folder."""
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        raise SaveLoadError(f"ONNX file name {name!r} is not a plain file name in the save directory.")
    return name


def _external_files(path: Path) -> list[str]:
    """Bare names of the external-data files ``path``'s initializers point to (exports over 2 GB write them)."""
    if all(f.name in ("model.onnx", "model.int8.onnx") for f in path.parent.iterdir()):
        return []  # only the exported files are there: nothing to parse for
    import onnx
    from onnx.external_data_helper import uses_external_data

    graph = onnx.load(str(path), load_external_data=False).graph
    return sorted({_plain(e.value) for t in graph.initializer if uses_external_data(t)
                   for e in t.external_data if e.key == "location"})


def _remove_tree(folder: Path) -> None:
    for item in sorted(folder.glob("*"), reverse=True):
        item.unlink(missing_ok=True)
    folder.rmdir()
