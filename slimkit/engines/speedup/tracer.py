"""Runtime channel tracer: runs the model once on the dummy input and follows every channel.

Why not ``torch.fx``: ``fx.symbolic_trace`` fails on Hugging Face models in transformers 5.x (Llama:
"co_varnames is too small", BERT: "'Proxy' object does not support item assignment") and
``transformers.utils.fx`` no longer exists there; any model with data-dependent Python control flow fails
too. Forward hooks alone see module calls but not the functional ops between them (``x + y``,
``torch.cat``, ``view``), which is exactly where channels get coupled. This tracer does both in one eager
run: module hooks record the call order and shapes and handle known layers as units, and a
``TorchFunctionMode`` sees every torch function called between layers, so whatever runs, traces.

A module with parameters of its own that is not a known layer is traced through too: each parameter it uses
directly (a layer scale, a class token, a position table) gets ids along its channel dim, and the ops that
combine it with an activation tie them, so it is shrunk with those channels (it never keeps one alive).

What it cannot see: arithmetic done outside torch (NumPy, Python numbers taken with ``.item()``), and
control flow that takes another branch for other inputs (only the dummy input's path is analysed). Ops
it does not understand are never guessed at: the channels reaching them are kept, and a mask that wants
them removed gets an :class:`UnsupportedOpError` naming the op.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from slimkit.errors import SlimkitError
from slimkit.evaluation.runtime import eval_mode
from slimkit.utils import run_model

from . import ops
from .errors import SpeedupError
from .graph import ChannelGraph, LeafRecord, channel_vector, compact, tensors_in
from .layers import own_params
from .leaves import follow_params, handle_leaf, leaf_kind
from .shared import tie_shared_weights


class ChannelTracer(TorchFunctionMode):
    """Keeps a shadow id tensor for every traced activation and updates it op by op."""

    def __init__(self, graph: ChannelGraph) -> None:
        super().__init__()
        self.graph = graph
        self._shadows: dict[int, tuple[weakref.ref, torch.Tensor]] = {}
        self._leaf_stack: list[str] = []
        self._scope: list[str] = []
        self._busy = False

    # -- shadows ---------------------------------------------------------------------------------------
    def get(self, t: Any) -> torch.Tensor | None:
        """The shadow of ``t`` (None when no traced channel reaches it)."""
        entry = self._shadows.get(id(t)) if isinstance(t, torch.Tensor) else None
        return entry[1] if entry is not None and entry[0]() is t else None

    def put(self, t: torch.Tensor, shadow: torch.Tensor | None) -> None:
        """Attach ``shadow`` to ``t``; the entry goes away with ``t`` (a reused id never sees a stale shadow)."""
        key = id(t)
        if shadow is None or shadow.shape != t.shape or not bool((compact(shadow) >= 0).any()):
            self._shadows.pop(key, None)
            return
        shadows = self._shadows

        def drop(ref: weakref.ref) -> None:
            if key in shadows and shadows[key][0] is ref:
                del shadows[key]

        self._shadows[key] = (weakref.ref(t, drop), shadow)

    def where(self) -> str:
        """Qualified name of the module running now."""
        return self._scope[-1] if self._scope else ""

    def pin_shadow(self, shadow: torch.Tensor, op: str, detail: str, fatal: bool = True) -> None:
        """Keep every channel carried by ``shadow``."""
        self.graph.pin(shadow.reshape(-1).cpu().numpy(), op, self.where(), detail, fatal)

    def pin_all(self, tensors: list[Any], op: str, detail: str, fatal: bool = True) -> None:
        """Keep every channel carried by any of ``tensors``."""
        for t in tensors:
            s = self.get(t)
            if s is not None:
                self.pin_shadow(s, op, detail, fatal)

    # -- torch function mode ---------------------------------------------------------------------------
    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self._leaf_stack or self._busy or not self._shadows:
            return out
        inputs = tensors_in((args, kwargs))
        if any(self.get(t) is not None for t in inputs):
            try:
                ops.handle(self, func, args, kwargs, out)
            except Exception as exc:  # never break the user's forward: keep what we could not follow
                self.pin_all(inputs, ops.op_name(func), f"following channels through it failed: {exc}")
                for t in tensors_in(out):
                    self.put(t, None)
        return out

    # -- module hooks ----------------------------------------------------------------------------------
    def attach(self, model: nn.Module) -> list[Any]:
        """Register the hooks on every module of ``model``; returns their handles."""
        handles = []
        for name, module in model.named_modules():
            kind = leaf_kind(module)
            handles.append(module.register_forward_pre_hook(self._pre(name, kind), with_kwargs=True))
            handles.append(module.register_forward_hook(self._post(name, kind, module), with_kwargs=True))
        return handles

    def _pre(self, name: str, kind: str | None) -> Any:
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            self._scope.append(name)
            if kind is not None:
                if self._leaf_stack:
                    self.graph.inner.setdefault(name, self._leaf_stack[0])
                self._leaf_stack.append(name)
            elif not self._leaf_stack and own_params(module):
                self._busy = True
                try:
                    follow_params(self, name, module)
                finally:
                    self._busy = False

        return hook

    def _post(self, name: str, kind: str | None, module: nn.Module) -> Any:
        def hook(mod: nn.Module, args: tuple, kwargs: dict, out: Any) -> None:
            self._busy = True
            try:
                if kind is not None:
                    self._leaf_stack.pop()
                    if not self._leaf_stack:
                        x, y = _primary_input(args, kwargs), _primary_output(out)
                        others = [t for t in tensors_in((args, kwargs)) if t is not x]
                        self.pin_all(others, type(module).__name__, "an extra tensor input of a layer")
                        try:
                            handle_leaf(self, name, kind, module, x, y)
                        except Exception as exc:  # keep the channels of a layer we could not analyse
                            self.pin_all([x, y], type(module).__name__, f"analysing the layer failed: {exc}")
                            if y is not None:
                                self.put(y, None)
            finally:
                self._busy = False
                self._scope.pop()

        return hook

    # -- layers ----------------------------------------------------------------------------------------
    def input_ids(self, name: str, x: torch.Tensor | None, dim: int, size: int) -> np.ndarray:
        """Ids along ``dim`` of a layer's input (all -1 when none are tracked; pins when they cannot be read)."""
        s = self.get(x)
        if s is None or x is None or x.dim() == 0 or x.shape[dim] != size:
            if s is not None:
                self.pin_shadow(s, name, "its input does not carry channels along the expected dim")
            return np.full(size, -1, dtype=np.int64)
        vec = channel_vector(s, dim)
        if vec is None:
            self.pin_shadow(s, name, "its input carries channels along several dims")
            return np.full(size, -1, dtype=np.int64)
        return vec

    def record(self, name: str, kind: str, module: nn.Module, in_ids: np.ndarray | None) -> LeafRecord:
        """The layer's record (made on its first call); a second call's input must carry the same channels."""
        rec = self.graph.leaves.get(name)
        if rec is None:
            rec = self.graph.leaves[name] = LeafRecord(name, kind, module, in_ids=in_ids)
        elif in_ids is not None and rec.in_ids is not None:  # called again: both inputs must shrink alike
            self.graph.uf.union_arrays(rec.in_ids, in_ids)
            mixed = (rec.in_ids >= 0) != (in_ids >= 0)
            self.graph.pin(np.concatenate([rec.in_ids[mixed], in_ids[mixed]]), type(module).__name__,
                           name, "the layer is called on inputs with different channel sources")
        return rec

    def pin_outputs(self, output: Any) -> None:
        """Model outputs keep their shape: every channel reaching them stays."""
        for t in tensors_in(_as_tree(output)):
            self.graph.output_shapes.append(tuple(t.shape))
            s = self.get(t)
            if s is not None:
                self.graph.pin(s.reshape(-1).cpu().numpy(), "model output", "", "the model output keeps its "
                               "shape", fatal=False)


def _as_tree(output: Any) -> Any:
    return list(output.values()) if isinstance(output, dict) else output  # Hugging Face ModelOutput is a dict


def _primary_input(args: tuple, kwargs: dict) -> torch.Tensor | None:
    for a in args:
        if isinstance(a, torch.Tensor):
            return a
    for key in ("hidden_states", "input", "x"):
        if isinstance(kwargs.get(key), torch.Tensor):
            return kwargs[key]
    return next((v for v in kwargs.values() if isinstance(v, torch.Tensor)), None)


def _primary_output(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    return None


def trace_channels(model: nn.Module, dummy_input: Any) -> ChannelGraph:
    """Run ``model`` once on ``dummy_input`` (eval mode, no grad) and return its channel graph."""
    if not isinstance(model, nn.Module):
        raise SpeedupError(f"The speedup needs a torch.nn.Module; got {type(model).__name__}. Pass the model itself.")
    graph = ChannelGraph()
    tracer = ChannelTracer(graph)
    handles = tracer.attach(model)
    try:
        with eval_mode(model), torch.no_grad(), tracer:
            output = run_model(model, dummy_input)
        tracer.pin_outputs(output)
        tie_shared_weights(graph)
    except SlimkitError:
        raise
    except Exception as exc:  # the user's forward failed: say so, with the original error
        raise SpeedupError(
            f"Running the model on dummy_input failed while tracing channels: {type(exc).__name__}: {exc}. "
            "Pass a dummy_input the model accepts (a Tensor, a tuple of positional args or a dict of kwargs)."
        ) from exc
    finally:
        for h in handles:
            h.remove()
    return graph
