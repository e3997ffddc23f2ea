"""Turn BatchNorm channel masks (Network Slimming) into masks on the layers that produce those channels.

The speedup shrinks Conv/Linear outputs; a pruned BatchNorm channel goes when the producing layer drops
that channel. One trace finds, for each normalised channel, every producer of its coupled class. A class
goes only when some masked norm drops it and no other norm that sees it keeps it.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from slimkit.compression.speedup import trace_channels

_PRODUCER_KINDS = ("conv", "linear")


def has_norm_masks(model: nn.Module, masks: Mapping[str, Any]) -> bool:
    """True when any mask sits on a BatchNorm layer."""
    modules = dict(model.named_modules())
    return any(isinstance(modules.get(name), _BatchNorm) for name in masks)


def producer_masks(model: nn.Module, dummy_input: Any, masks: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Masks for ``ModelSpeedup``: BatchNorm entries replaced by ``{"out_channels": ...}`` on their producers."""
    modules = dict(model.named_modules())
    norm = {n: m for n, m in masks.items() if isinstance(modules.get(n), _BatchNorm)}
    out: dict[str, Any] = {n: m for n, m in masks.items() if n not in norm}
    if not norm:
        return out
    graph = trace_channels(model, dummy_input)
    roots = graph.uf.roots()
    drop_vote: set[int] = set()
    keep_vote: set[int] = set()
    for name, rec in graph.leaves.items():
        if rec.kind != "norm" or rec.in_ids is None:
            continue
        keep = np.ones(len(rec.in_ids), dtype=bool)
        if name in norm:
            keep = norm[name]["weight_mask"].detach().reshape(-1).ne(0).cpu().numpy()
        for i, k in zip(rec.in_ids.tolist(), keep.tolist(), strict=True):
            if i >= 0:
                (keep_vote if k else drop_vote).add(int(roots[i]))
    dropped = drop_vote - keep_vote
    unreached = [n for n in norm if n not in graph.leaves]
    if unreached:
        warnings.warn(f"{unreached}: never ran on dummy_input, so their masks were ignored by the speedup.",
                      UserWarning, stacklevel=3)
    for space in graph.spaces.values():
        rec = graph.leaves.get(space.owner)
        if space.kind != "out" or rec is None or rec.kind not in _PRODUCER_KINDS or space.owner in out:
            continue
        keep = ~np.isin(roots[space.ids], list(dropped))
        if not keep.all():
            out[space.owner] = {"out_channels": torch.as_tensor(np.flatnonzero(keep), dtype=torch.long)}
    return out
