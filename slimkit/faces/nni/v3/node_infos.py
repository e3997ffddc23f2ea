"""NNI 3.0's ``ModelSpeedup.node_infos``: per graph node, which channels of its output and parameters survived.

NNI 3.0's fusion example reads them after ``speedup_model()`` to trim a calibration config to the channels a speedup
kept: ``for node, info in speedup.node_infos.items()``, ``node.op == "call_module"``, ``node.target``,
``speedup.node_infos[node.args[0]].output_masks`` and ``info.param_masks["weight"]``. Here the nodes are those of a
``torch.fx`` trace of the model before the speedup; the masks (shapes of the unshrunk tensors, ones where a channel
was kept, zeros where it went) come from the kept-channel record of slimkit's speedup engine: a layer's own record
where it has one, a conv or linear layer without one keeps everything, and any other node keeps the channels of its
first input when its channel count (dim 1) is the same, else everything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import fx, nn
from torch.fx.passes.shape_prop import ShapeProp

from slimkit.engines.speedup import SpeedupError

__all__ = ["NodeInfo", "TracedShapes", "infos_or_error", "node_infos", "trace_shapes"]

_OWN_CHANNELS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)


class NodeInfo:
    """One node's masks: ``output_masks`` (its output's shape) and ``param_masks`` (``{"weight", "bias"}``)."""

    def __init__(self, output_masks: torch.Tensor | None, param_masks: dict[str, torch.Tensor]) -> None:
        self.output_masks = output_masks
        self.param_masks = param_masks

    def __repr__(self) -> str:
        shape = None if self.output_masks is None else tuple(self.output_masks.shape)
        return f"NodeInfo(output_masks={shape}, param_masks={sorted(self.param_masks)})"


class TracedShapes:
    """A ``torch.fx`` trace of a model with every node's output shape and every layer's parameter shapes."""

    def __init__(self, graph: fx.GraphModule, outputs: dict[fx.Node, torch.Size],
                 params: dict[str, dict[str, torch.Size]]) -> None:
        self.graph, self.outputs, self.params = graph, outputs, params


def trace_shapes(model: nn.Module, dummy_input: Any) -> TracedShapes:
    """Trace ``model`` with ``torch.fx`` and run ``dummy_input`` (a tensor or a tuple of them) for the shapes."""
    graph = fx.symbolic_trace(model)
    args = dummy_input if isinstance(dummy_input, tuple) else (dummy_input,)
    with torch.no_grad():
        ShapeProp(graph).propagate(*args)
    outputs = {n: n.meta["tensor_meta"].shape for n in graph.graph.nodes if hasattr(n.meta.get("tensor_meta"), "shape")}
    params = {name: {k: p.shape for k, p in m.named_parameters(recurse=False) if k in ("weight", "bias")}
              for name, m in model.named_modules()}
    return TracedShapes(graph, outputs, params)


def _channel_mask(shape: torch.Size, keep: list[int] | None, dim: int = 1) -> torch.Tensor:
    mask = torch.ones(shape)
    if keep is not None and len(shape) > dim:
        gone = sorted(set(range(shape[dim])) - set(keep))
        if gone:
            mask.index_fill_(dim, torch.tensor(gone), 0.0)
    return mask


def node_infos(traced: TracedShapes, kept: Mapping[str, Mapping[str, Any]]) -> dict[fx.Node, NodeInfo]:
    """Every node's :class:`NodeInfo` under the speedup's kept-channel record ``kept`` (see the module docstring)."""
    modules = dict(traced.graph.named_modules())
    channels: dict[fx.Node, list[int] | None] = {}  # kept channels of dim 1; None: all of them
    infos: dict[fx.Node, NodeInfo] = {}
    for node in traced.graph.graph.nodes:
        shape = traced.outputs.get(node)
        first = next((a for a in node.args if isinstance(a, fx.Node)), None)
        record = kept.get(str(node.target)) if node.op == "call_module" else None
        if record is not None and "out" in record:
            keep = list(record["out"])
        elif node.op == "call_module" and isinstance(modules.get(str(node.target)), _OWN_CHANNELS):
            keep = None
        elif first is not None and shape is not None and len(shape) > 1 and \
                traced.outputs.get(first, ())[1:2] == shape[1:2]:
            keep = channels.get(first)
        else:
            keep = None
        channels[node] = keep
        params: dict[str, torch.Tensor] = {}
        if node.op == "call_module":
            for key, param_shape in traced.params.get(str(node.target), {}).items():
                mask = _channel_mask(param_shape, keep, 0)
                if key == "weight" and record is not None and "in" in record and len(param_shape) > 1:
                    mask = mask * _channel_mask(param_shape, list(record["in"]), 1)
                params[key] = mask
        infos[node] = NodeInfo(_channel_mask(shape, keep) if shape is not None else None, params)
    return infos


def infos_or_error(traced: TracedShapes | Exception | None, kept: Mapping[str, Any] | None) -> dict[fx.Node, NodeInfo]:
    """:func:`node_infos` after a speedup, or a clear error saying why there are none."""
    if kept is None:
        raise SpeedupError("ModelSpeedup.node_infos is filled by speedup_model(); call it first.")
    if isinstance(traced, Exception) or traced is None:
        raise SpeedupError(f"ModelSpeedup.node_infos needs a torch.fx trace of the model, which failed: {traced}. "
                           "The speedup itself did not need it; read speedup.kept_channels instead "
                           "({layer: {'out': [...], 'in': [...]}}).")
    return node_infos(traced, kept)
