"""An ``nn.Module`` around an ONNX Runtime session, and the JSON records that let a save rebuild it without the model.

:class:`OnnxRuntimeModule` wraps an ONNX Runtime ``InferenceSession`` behind the original forward's signature;
the ``*_to_json``/``*_from_json`` helpers store that signature and the output type in the save's JSON.
"""

from __future__ import annotations

import importlib
import inspect
import os
import warnings
from collections.abc import Mapping
from typing import Any

import torch

from slimkit.errors import ModelNotSupportedError
from slimkit.utils import Inputs

#: ``optimization`` level name -> ONNX Runtime ``GraphOptimizationLevel`` member.
LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
           "all": "ORT_ENABLE_ALL"}


def bind_arguments(signature: inspect.Signature, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``signature.bind`` as a dict of argument name -> value; a mismatch raises :class:`ModelNotSupportedError`."""
    try:
        return dict(signature.bind(*args, **kwargs).arguments)
    except TypeError as exc:
        raise ModelNotSupportedError(f"The ONNX Runtime model takes the original forward's arguments {signature}: "
                                     f"{exc}.") from exc


def signature_to_json(signature: inspect.Signature) -> list[dict[str, Any]]:
    """Parameter names, kinds and JSON-able defaults: what :func:`bind_arguments` needs (others kept as None)."""
    params = []
    for p in signature.parameters.values():
        entry: dict[str, Any] = {"name": p.name, "kind": p.kind.name}
        if p.default is not inspect.Parameter.empty:
            plain = p.default is None or isinstance(p.default, (bool, int, float, str))
            entry["default"] = p.default if plain else None
        params.append(entry)
    return params


def signature_from_json(params: list[dict[str, Any]]) -> inspect.Signature:
    """Rebuild the signature :func:`signature_to_json` recorded (KeyError/ValueError on an invalid record)."""
    kinds = type(inspect.Parameter.POSITIONAL_ONLY)  # the parameter-kind enum, looked up by name
    empty = inspect.Parameter.empty
    return inspect.Signature([inspect.Parameter(e["name"], kinds[e["kind"]], default=e.get("default", empty))
                              for e in params])


def output_type_to_json(output_type: type | None) -> str | None:
    """``"dict"``, a transformers ``ModelOutput`` class path, or None (the reloaded model then returns a tuple)."""
    from transformers.utils import ModelOutput

    if output_type is dict:
        return "dict"
    known = isinstance(output_type, type) and issubclass(output_type, ModelOutput)
    if known and output_type.__module__.split(".")[0] == "transformers" and "." not in output_type.__qualname__:
        return f"{output_type.__module__}.{output_type.__qualname__}"
    return None


def output_type_from_json(name: str | None) -> type | None:
    """Resolve :func:`output_type_to_json`'s name; only ``dict`` and transformers ``ModelOutput`` classes import."""
    from transformers.utils import ModelOutput

    if name in (None, "dict"):
        return dict if name else None
    module, _, cls_name = str(name).rpartition(".")
    cls = None
    if module.split(".")[0] == "transformers":  # a saved file never makes slimkit import anything else
        try:
            cls = getattr(importlib.import_module(module), cls_name)
        except (ImportError, AttributeError):
            cls = None
    if isinstance(cls, type) and issubclass(cls, ModelOutput):
        return cls
    warnings.warn(f"{name!r} is not a transformers ModelOutput here; the reloaded model returns a tuple.",
                  RuntimeWarning, stacklevel=2)
    return None


def split_inputs(inputs: Inputs) -> tuple[tuple, dict[str, Any]]:
    """``(args, kwargs)`` for calling a model on ``inputs`` (a dict is keywords, a tuple/list positional)."""
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
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[level])
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
        bound = bind_arguments(self._signature, args, kwargs)
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


def output_layout(output: Any) -> tuple[list[str] | None, type | None]:
    """The keys and type of a dict-like output of tensors (to rebuild it after ONNX Runtime), else ``(None, None)``."""
    if isinstance(output, Mapping) and all(isinstance(v, torch.Tensor) for v in output.values()):
        return list(output.keys()), type(output)
    return None, None
