"""The channel graph: which output channels of which layers are tied together, and who consumes them.

Every output channel of a producing layer (Conv, Linear, Embedding, an attention block's heads, a MoE
experts module) gets a global integer id; so does every channel of a per-channel parameter that a module
uses directly in its forward (a layer scale, a class token): those *follow* their channels, they never keep
one alive. Ops that tie channels (residual adds, multiplications, contractions) merge ids in a
union-find; a merged class of ids is removed only as a whole. Consumers (the input side of Conv/Linear)
and followers (norms) remember which id each of their channels carries, so shrinking a producer shrinks
them too. Pins mark ids that must stay (model outputs, ops the speedup cannot shrink).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from slimkit.engines._union_find import UnionFind

from .attention_spec import AttentionSpec


@dataclass
class Space:
    """A block of ids owned by one producer: a layer's output channels or an attention block's heads."""

    owner: str
    ids: np.ndarray
    #: "out" (a layer's output channels), "heads" (an attention block's context), "param" (a per-channel
    #: parameter: follows, never votes), "inner" (a MoE experts module's intermediate channels, per expert)
    kind: str = "out"

    @property
    def votes(self) -> bool:
        """Whether the space's producer decides which of its channels stay (params only follow)."""
        return self.kind != "param"


@dataclass
class Pin:
    """Ids that must be kept. ``fatal`` pins raise when a mask wants to remove one of them."""

    ids: np.ndarray
    op: str
    location: str
    detail: str
    fatal: bool = True


@dataclass
class LeafRecord:
    """A module the tracer handled as one unit, with the ids its input and output channels carry."""

    name: str
    kind: str  # conv, depthwise, grouped_conv, linear, embedding, norm, attention, unknown
    module: nn.Module
    in_ids: np.ndarray | None = None
    out_ids: np.ndarray | None = None


@dataclass
class ParamRecord:
    """A parameter a traced-through module uses in its forward; ``dim`` carries its channels."""

    name: str  # qualified parameter name, e.g. "encoder.layer.0.layer_scale"
    module: nn.Module
    attr: str
    dim: int
    ids: np.ndarray


@dataclass
class AttentionRecord(AttentionSpec):
    """A recognised multi-head attention block in the trace: its :class:`AttentionSpec` with model-level names.

    With a fused projection (``qkv``: one Linear/Conv1D whose rows are q, then k, then v) ``q``, ``k`` and
    ``v`` all name that layer and ``fused`` is True.
    """

    name: str = ""
    heads_space: Space | None = None  # the context ids when no o-projection sits inside the block

    @property
    def group_size(self) -> int:
        """Query heads per kv head."""
        return self.num_heads // self.num_kv_heads

    def projections(self) -> list[str]:
        """The distinct layers holding the q/k/v rows."""
        return [self.q] if self.fused else [self.q, self.k, self.v]

    def rows(self, keep_kv: np.ndarray) -> dict[str, list[int]]:
        """Rows of each q/k/v layer that stay when the kv-head groups ``keep_kv`` (bool per group) stay."""
        d, g, h, hk = self.head_dim, self.group_size, self.num_heads, self.num_kv_heads
        q = [i for j in np.flatnonzero(keep_kv).tolist() for i in range(j * g * d, (j + 1) * g * d)]
        kv = [i for j in np.flatnonzero(keep_kv).tolist() for i in range(j * d, (j + 1) * d)]
        if self.fused:
            return {self.q: q + [h * d + i for i in kv] + [(h + hk) * d + i for i in kv]}
        return {self.q: q, self.k: kv, self.v: kv}

    def row_groups(self) -> dict[str, np.ndarray]:
        """kv-head group of every q/k/v row, per layer."""
        d, g, hk = self.head_dim, self.group_size, self.num_kv_heads
        q, kv = np.repeat(np.arange(hk), g * d), np.repeat(np.arange(hk), d)
        if self.fused:
            return {self.q: np.concatenate([q, kv, kv])}
        return {self.q: q, self.k: kv, self.v: kv}


@dataclass
class ChannelGraph:
    """Everything the tracer learned about channel coupling in one forward pass."""

    uf: UnionFind = field(default_factory=UnionFind)
    spaces: dict[str, Space] = field(default_factory=dict)
    leaves: dict[str, LeafRecord] = field(default_factory=dict)
    attention: dict[str, AttentionRecord] = field(default_factory=dict)
    pins: list[Pin] = field(default_factory=list)
    params: dict[str, ParamRecord] = field(default_factory=dict)
    residual: list[np.ndarray] = field(default_factory=list)  # ids joined by a residual add
    inner: dict[str, str] = field(default_factory=dict)  # module run inside an unanalysed module -> that module
    output_shapes: list[tuple[int, ...]] = field(default_factory=list)

    def new_space(self, owner: str, size: int, kind: str = "out") -> Space:
        """Allocate (or return, for a module called again) the id block of ``owner``."""
        key = f"{owner}#{kind}"
        if key not in self.spaces:
            self.spaces[key] = Space(owner, self.uf.allocate(size), kind)
        return self.spaces[key]

    def pin(self, ids: np.ndarray | None, op: str, location: str, detail: str, fatal: bool = True) -> None:
        """Record that the tracked ids in ``ids`` must be kept."""
        if ids is None:
            return
        tracked = np.unique(ids[ids >= 0])
        if tracked.size:
            self.pins.append(Pin(tracked, op, location, detail, fatal))

    def owners_of(self, ids: np.ndarray, roots: np.ndarray | None = None) -> list[str]:
        """Names of the producers whose ids share a class with ``ids``."""
        roots = self.uf.roots() if roots is None else roots
        wanted = set(roots[ids[ids >= 0]].tolist())
        return sorted({s.owner for s in self.spaces.values() if s.votes and wanted.intersection(roots[s.ids].tolist())})


def compact(shadow: torch.Tensor) -> torch.Tensor:
    """The same ids without broadcast (stride-0) repeats: size 1 along every expanded dim."""
    index = tuple(slice(0, 1) if st == 0 and n > 1 else slice(None) for st, n in zip(shadow.stride(), shadow.shape,
                                                                                   strict=True))
    return shadow[index]


def channel_vector(shadow: torch.Tensor, dim: int) -> np.ndarray | None:
    """Ids along ``dim`` of a shadow tensor, or None when they differ between positions of the other dims."""
    size = shadow.shape[dim]
    small = compact(shadow)
    if small.shape[dim] != size:  # broadcast along dim: one id for every position
        small = small.expand(*small.shape[:dim % shadow.dim()], size, *small.shape[dim % shadow.dim() + 1:])
    rows = small.movedim(dim, -1).reshape(-1, size)
    first = rows[:1]
    if rows.shape[0] > 1 and not bool((rows == first).all()):
        return None
    return first[0].cpu().numpy().astype(np.int64)


def varying_dims(shadow: torch.Tensor) -> list[int]:
    """Dims along which the ids of a shadow tensor change."""
    out = []
    shadow = compact(shadow)
    for d, n in enumerate(shadow.shape):
        if n > 1 and not bool((shadow == shadow.narrow(d, 0, 1)).all()):
            out.append(d)
    return out


def ids_along(ids: np.ndarray, like: torch.Tensor, dim: int) -> torch.Tensor:
    """A shadow tensor shaped like ``like`` carrying ``ids`` along ``dim`` (a broadcast view, no copy)."""
    dim = dim % like.dim()
    shape = [1] * like.dim()
    shape[dim] = len(ids)
    return torch.as_tensor(ids, device=like.device).view(shape).expand(like.shape)


def tensors_in(obj: Any) -> list[torch.Tensor]:
    """All tensors inside a nested args/kwargs structure."""
    return [x for x in tree_flatten(obj)[0] if isinstance(x, torch.Tensor)]


class Tracer(Protocol):
    """What the op and leaf handlers use of the channel tracer (:class:`.tracer.ChannelTracer` is the one)."""

    graph: ChannelGraph

    def get(self, t: Any) -> torch.Tensor | None:
        """The shadow of ``t`` (None when no traced channel reaches it)."""
    def put(self, t: torch.Tensor, shadow: torch.Tensor | None) -> None:
        """Attach ``shadow`` to ``t``."""
    def pin_shadow(self, shadow: torch.Tensor, op: str, detail: str, fatal: bool = True) -> None:
        """Keep every channel carried by ``shadow``."""
    def pin_all(self, tensors: list[Any], op: str, detail: str, fatal: bool = True) -> None:
        """Keep every channel carried by any of ``tensors``."""
    def record(self, name: str, kind: str, module: nn.Module, in_ids: np.ndarray | None) -> LeafRecord:
        """The layer's record (made on its first call)."""
    def input_ids(self, name: str, x: torch.Tensor | None, dim: int, size: int) -> np.ndarray:
        """The channel ids entering layer ``name`` along ``dim``."""
