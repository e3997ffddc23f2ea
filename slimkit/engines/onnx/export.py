"""Export a torch model to ONNX (optionally ONNX Runtime dynamic int8), save the files that run, and reopen them.

:func:`compile_onnx` returns an :class:`OnnxRuntimeModule` and the JSON-able record that :func:`open_saved`
needs to rebuild it from a save folder without the original model; :func:`save_files` writes that folder.
"""

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

from slimkit.engines.onnx.module import (
    OnnxRuntimeModule,
    bind_arguments,
    output_layout,
    output_type_from_json,
    output_type_to_json,
    signature_from_json,
    signature_to_json,
    split_inputs,
)
from slimkit.errors import SaveLoadError
from slimkit.utils import Inputs


def export_onnx(model: torch.nn.Module, inputs: Inputs, path: Path, exporter: str) -> tuple[inspect.Signature, list]:
    """Export ``model`` called on ``inputs`` to ``path`` with a dynamic batch axis (and sequence axis for tokens)."""
    signature = inspect.signature(model.forward)
    args, kwargs = split_inputs(inputs)
    bound = bind_arguments(signature, args, kwargs)
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


def quantize_onnx_dynamic(path: Path, out: Path, per_channel: bool, reduce_range: bool) -> Path:
    """ONNX Runtime's dynamic int8 (int8 weights, activations quantized per call) of ``path``, written to ``out``."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # it asks for a pre-processing pass on every call
    try:
        quantize_dynamic(str(path), str(out), per_channel=per_channel, reduce_range=reduce_range,
                         weight_type=QuantType.QInt8)
    finally:
        logging.disable(previous)
    return out


def compile_onnx(model: torch.nn.Module, inputs: Inputs, *, exporter: str = "torchscript", int8: bool = False,
                 per_channel: bool = True, reduce_range: bool = False, threads: int = 0,
                 optimization: str = "all") -> tuple[OnnxRuntimeModule, dict[str, Any]]:
    """Export ``model`` (on example ``inputs``) into a temporary folder and open it in ONNX Runtime.

    Returns the module (the folder lives as long as it) and the JSON-able record :func:`open_saved` reads back.
    ``threads`` 0 uses torch's current thread count.
    """
    folder = Path(tempfile.mkdtemp(prefix="slimkit-onnx-"))
    path = folder / "model.onnx"
    signature, names = export_onnx(model, inputs, path, exporter)
    if int8:
        path = quantize_onnx_dynamic(path, folder / "model.int8.onnx", per_channel, reduce_range)
    args, kwargs = split_inputs(inputs)
    with torch.no_grad():
        keys, out_type = output_layout(model(*args, **kwargs))
    threads = threads or torch.get_num_threads()
    module = OnnxRuntimeModule(path, signature, names, keys, out_type, threads, optimization)
    weakref.finalize(module, _remove_tree, folder)
    record = dict(input_names=module.input_names, threads=threads, onnx_bytes=path.stat().st_size,
                  onnx_file=path.name, external_data=external_files(path), signature=signature_to_json(signature),
                  output_keys=keys, output_type=output_type_to_json(out_type))
    return module, record


def save_files(module: Any, directory: Path, record: dict[str, Any]) -> None:
    """Copy the ONNX file ``module`` runs (and its external-data files) into ``directory``."""
    if not isinstance(module, OnnxRuntimeModule):
        raise SaveLoadError(f"onnxruntime saves an OnnxRuntimeModule, got {type(module).__name__}.")
    source = Path(module.onnx_path)
    for name in [record["onnx_file"], *record["external_data"]]:
        try:
            shutil.copyfile(source.with_name(name), directory / plain_name(name))
        except OSError as exc:
            raise SaveLoadError(f"Cannot copy {source.with_name(name)} into the save ({exc}). The ONNX file "
                                "this model runs was removed: smash the original model again.") from exc


def open_saved(directory: Path, record: dict[str, Any], threads: int = 0,
               optimization: str = "all") -> OnnxRuntimeModule:
    """Open the ONNX file saved in ``directory`` (described by ``record``) in a new session; nothing is deleted."""
    try:
        files = [plain_name(record["onnx_file"]), *map(plain_name, record["external_data"])]
        signature = signature_from_json(record["signature"])
        out_type = output_type_from_json(record["output_type"])
        names, keys = list(record["input_names"]), record["output_keys"]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SaveLoadError(f"{directory / 'smash_config.json'}: the onnxruntime record is incomplete or "
                            f"invalid ({type(exc).__name__}: {exc}); it was saved by an older slimkit or "
                            "edited. Smash the original model again.") from exc
    for name in files:
        if not (directory / name).is_file():
            raise SaveLoadError(f"{directory / name} is missing: the save is incomplete. Copy the whole "
                                "directory, or save the smashed model again.")
    try:
        return OnnxRuntimeModule(directory / files[0], signature, names, keys if out_type else None, out_type,
                                 threads or torch.get_num_threads(), optimization)
    except Exception as exc:
        raise SaveLoadError(f"ONNX Runtime cannot load {directory / files[0]} ({str(exc)[:300]}): the file is "
                            "truncated or corrupt. Save the smashed model again, or smash the original "
                            "model again.") from exc


def plain_name(name: str) -> str:
    """``name`` when it is a bare file name (no folder part), so saves never read or write outside their folder."""
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        raise SaveLoadError(f"ONNX file name {name!r} is not a plain file name in the save directory.")
    return name


def external_files(path: Path) -> list[str]:
    """Bare names of the external-data files ``path``'s initializers point to (exports over 2 GB write them)."""
    if all(f.name in ("model.onnx", "model.int8.onnx") for f in path.parent.iterdir()):
        return []  # only the exported files are there: nothing to parse for
    import onnx
    from onnx.external_data_helper import uses_external_data

    graph = onnx.load(str(path), load_external_data=False).graph
    return sorted({plain_name(e.value) for t in graph.initializer if uses_external_data(t)
                   for e in t.external_data if e.key == "location"})


def _remove_tree(folder: Path) -> None:
    for item in sorted(folder.glob("*"), reverse=True):
        item.unlink(missing_ok=True)
    folder.rmdir()
