"""Runtime channel tracer: runs the model once on the dummy input and follows every channel.

Why not ``torch.fx``: ``fx.symbolic_trace`` fails on Hugging Face models in transformers 5.x (Llama:
"co_varnames is too small", BERT: "'Proxy' object does not support item assignment") and
``transformers.utils.fx`` no longer exists there; any model with data-dependent Python control flow fails
too. Forward hooks alone see module calls but not the functional ops between them (``x + y``,
``torch.cat``, ``view``), which is exactly where channels get coupled. This tracer does both in one eager
run: module hooks record the call order and shapes and handle known layers as units, and a
``TorchFunctionMode`` sees every torch function called between layers, so whatever runs, traces.

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
from slimkit.utils import run_model

from . import ops
from .errors import SpeedupError
from .graph import AttentionRecord, ChannelGraph, LeafRecord, ModuleCall, channel_vector, compact, ids_along, tensors_in
from .layers import attention_spec, leaf_kind, norm_channel_dim, norm_problem

CHANNEL_DIM = {"conv": 1, "depthwise": 1, "grouped_conv": 1, "linear": -1, "attention": -1}


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

        return hook

    def _post(self, name: str, kind: str | None, module: nn.Module) -> Any:
        def hook(mod: nn.Module, args: tuple, kwargs: dict, out: Any) -> None:
            self._busy = True
            try:
                x = _primary_input(args, kwargs)
                y = _primary_output(out)
                if kind is not None:
                    self._leaf_stack.pop()
                    if not self._leaf_stack:
                        others = [t for t in tensors_in((args, kwargs)) if t is not x]
                        self.pin_all(others, type(module).__name__, "an extra tensor input of a layer")
                        try:
                            self._leaf(name, kind, module, x, y)
                        except Exception as exc:  # keep the channels of a layer we could not analyse
                            self.pin_all([x, y], type(module).__name__, f"analysing the layer failed: {exc}")
                            if y is not None:
                                self.put(y, None)
                if not self._leaf_stack:
                    shapes = [tuple(t.shape) if t is not None else None for t in (x, y)]
                    self.graph.calls.append(ModuleCall(name, type(module).__name__, *shapes))
            finally:
                self._busy = False
                self._scope.pop()

        return hook

    # -- layers ----------------------------------------------------------------------------------------
    def _input_ids(self, name: str, x: torch.Tensor | None, dim: int, size: int) -> np.ndarray:
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

    def _record(self, name: str, kind: str, module: nn.Module, in_ids: np.ndarray | None) -> LeafRecord:
        rec = self.graph.leaves.get(name)
        if rec is None:
            rec = self.graph.leaves[name] = LeafRecord(name, kind, module, in_ids=in_ids)
        elif in_ids is not None and rec.in_ids is not None:  # called again: both inputs must shrink alike
            self.graph.uf.union_arrays(rec.in_ids, in_ids)
            mixed = (rec.in_ids >= 0) != (in_ids >= 0)
            self.graph.pin(np.concatenate([rec.in_ids[mixed], in_ids[mixed]]), type(module).__name__,
                           name, "the layer is called on inputs with different channel sources")
        return rec

    def _leaf(self, name: str, kind: str, module: nn.Module, x: torch.Tensor | None, y: torch.Tensor | None) -> None:
        g = self.graph
        if kind == "unknown":
            self._record(name, kind, module, None)
            self.pin_all([x], type(module).__name__, "a module with its own parameters that the speedup "
                         "cannot shrink")
            return
        if kind == "embedding":
            rec = self._record(name, kind, module, None)
            rec.out_ids = g.new_space(name, module.embedding_dim).ids
        elif kind == "norm":
            dim = norm_channel_dim(module)
            size = module.weight.numel() if getattr(module, "weight", None) is not None else x.shape[dim]
            rec = self._record(name, kind, module, self._input_ids(name, x, dim, size))
            rec.out_ids = rec.in_ids
            problem = norm_problem(module)
            if problem:
                g.pin(rec.in_ids, type(module).__name__, name, problem)
            if y is not None and x is not None and y.shape == x.shape:
                self.put(y, self.get(x))
            return
        elif kind == "attention":
            rec = self._attention(name, module, x)
        else:
            dim = CHANNEL_DIM[kind]
            size = module.in_features if kind == "linear" else module.in_channels
            rec = self._record(name, kind, module, self._input_ids(name, x, dim, size))
            if kind == "depthwise":
                rec.out_ids = np.repeat(rec.in_ids, module.out_channels // module.in_channels)
            else:
                size = module.out_features if kind == "linear" else module.out_channels
                rec.out_ids = g.new_space(name, size).ids
            if kind == "grouped_conv":
                detail = f"grouped convolution with groups={module.groups} ties channels in groups"
                g.pin(rec.in_ids, "Conv(groups>1)", name, detail)
                g.pin(rec.out_ids, "Conv(groups>1)", name, detail)
        if y is not None and rec.out_ids is not None and y.dim() and y.shape[CHANNEL_DIM.get(kind, -1)] == len(
            rec.out_ids
        ):
            self.put(y, ids_along(rec.out_ids, y, CHANNEL_DIM.get(kind, -1)))

    def _attention(self, name: str, module: nn.Module, x: torch.Tensor | None) -> LeafRecord:
        spec = attention_spec(module)
        size = getattr(module, spec.q).in_features
        rec = self._record(name, "attention", module, self._input_ids(name, x, -1, size))
        att = self.graph.attention.get(name)
        if att is None:
            full = {n: f"{name}.{n}" if name else n for n in (spec.q, spec.k, spec.v, spec.o) if n}
            att = AttentionRecord(name, full[spec.q], full[spec.k], full[spec.v], full.get(spec.o), spec.num_heads,
                                  spec.num_kv_heads, spec.head_dim)
            self.graph.attention[name] = att
        if spec.o is not None:
            rec.out_ids = self.graph.new_space(att.o, getattr(module, spec.o).out_features).ids
        else:
            att.heads_space = self.graph.new_space(name, spec.num_heads * spec.head_dim, kind="heads")
            rec.out_ids = att.heads_space.ids
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
    if isinstance(output, dict):  # Hugging Face ModelOutput is an OrderedDict
        return [v for v in output.values()]
    return output


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


def _pin_shared_weights(graph: ChannelGraph) -> None:
    """A weight tied between layers (e.g. embeddings and lm_head) cannot be sliced two ways: keep its channels."""
    users: dict[int, list[str]] = {}
    for rec in graph.leaves.values():
        for p in rec.module.parameters():
            users.setdefault(id(p), []).append(rec.name)
    for names in users.values():
        for name in names if len(names) > 1 else ():
            rec = graph.leaves[name]
            others = [n for n in names if n != name]
            for ids in (rec.in_ids, rec.out_ids):
                graph.pin(ids, "shared weight", name, f"it shares a weight with {others}")


def trace_channels(model: nn.Module, dummy_input: Any) -> ChannelGraph:
    """Run ``model`` once on ``dummy_input`` (eval mode, no grad) and return its channel graph."""
    if not isinstance(model, nn.Module):
        raise SpeedupError(f"The speedup needs a torch.nn.Module; got {type(model).__name__}. Pass the model itself.")
    graph = ChannelGraph()
    tracer = ChannelTracer(graph)
    modes = {m: m.training for m in model.modules()}
    handles = tracer.attach(model)
    model.eval()
    try:
        with torch.no_grad(), tracer:
            output = run_model(model, dummy_input)
        tracer.pin_outputs(output)
        _pin_shared_weights(graph)
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
        for m, mode in modes.items():
            m.training = mode
    return graph
