"""DCFF: dynamic-coded filter fusion (Lin et al., 2021) on slimkit's channel units.

Each conv producing a unit's channels turns its filters into a distribution over its filters: row ``i`` of
``P = softmax(-cdist(W, W) / tau)`` (``W``: the flattened filters). A filter whose distribution stands out from
the others (large ``mean_k P_ik (log P_ik - mean_j log P_kj)``, a KL-style score) is kept; the unit keeps the
channels of highest summed score. A kept filter is not copied but *fused*: the conv computes with
``W'_i = sum_k P_ik W_k`` (and the same mix of biases), so every filter keeps training through the ones that
stay. ``tau`` anneals from 1 to 1e-4 (:func:`temperature`), so ``P`` ends close to one-hot; the fused conv is
what :meth:`FilterFusion.deploy` shrinks.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parametrize

from slimkit.engines.pruning.channel_units import ChannelUnits
from slimkit.engines.pruning.unit import ChannelUnit


def temperature(step: int, max_steps: int, start: float = 1.0, end: float = 1e4, k: float = 1.0) -> float:
    """``1/T`` with ``T`` rising on a logistic curve from ``start`` at step 0 to ``end`` at ``max_steps``."""
    span = max(int(max_steps), 1)
    scale = 2 * (end - start) * (1 + math.exp(-k * span)) / (1 - math.exp(-k * span))
    return 1.0 / (scale / (1 + math.exp(-k * step)) + start - scale / 2)


class _Fuse(nn.Module):
    """Parametrization: the weight (or bias) seen by the layer is ``mix @ raw`` (rows: output channels)."""

    def __init__(self, rows: int) -> None:
        super().__init__()
        self.register_buffer("mix", torch.eye(rows))

    def forward(self, raw: torch.Tensor) -> torch.Tensor:
        return (self.mix.to(raw) @ raw.reshape(raw.shape[0], -1)).reshape(raw.shape)


def _fusable(module: nn.Module) -> bool:
    return isinstance(module, nn.Conv2d) and module.groups == 1


class FilterFusion:
    """Fused filters for the conv producers of ``units`` (other layers are only masked)."""

    def __init__(self, units: ChannelUnits) -> None:
        self.units = units
        self.fused: dict[str, nn.Module] = {}
        for unit in units.units:
            for layer in unit.producers:
                module = units.modules[layer]
                if _fusable(module) and layer not in self.fused:  # a layer in several units is fused once
                    for pname in ("weight", "bias"):
                        if getattr(module, pname, None) is not None:
                            parametrize.register_parametrization(module, pname, _Fuse(module.out_channels))
                    self.fused[layer] = module
        units.attach()

    @staticmethod
    @torch.no_grad()
    def distribution(weight: torch.Tensor, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(``P``, the KL-style score of each filter) of one layer's filters at temperature ``tau``."""
        flat = weight.detach().reshape(weight.shape[0], -1).double()
        p = torch.softmax(-torch.cdist(flat, flat) / tau, dim=1)
        logp = (p + 1e-7).log()
        score = (p * (logp - logp.mean(dim=1).unsqueeze(0))).mean(dim=1)
        return p, score

    @torch.no_grad()
    def fuse(self, unit: ChannelUnit, count: int, tau: float) -> None:
        """Keep ``count`` channels of ``unit`` by fused-filter score and set every conv's fusion matrix."""
        score = torch.zeros(unit.num_channels, dtype=torch.float64)
        dists: dict[str, torch.Tensor] = {}
        for layer, idx in unit.producers.items():
            module = self.fused.get(layer)
            if module is None:
                continue
            p, s = self.distribution(parametrize_original(module, "weight"), tau)
            dists[layer] = p
            inside = np.flatnonzero(idx >= 0)
            score.index_add_(0, torch.from_numpy(idx[inside]), s.cpu()[torch.from_numpy(inside)])  # unit's ids: host
        unit.keep(torch.argsort(score, descending=True, stable=True)[:count].tolist())
        kept = (unit.mask != 0).numpy()
        for layer, p in dists.items():
            rows = [(row, int(u)) for row, u in enumerate(unit.producers[layer].tolist()) if u >= 0]
            for param in self.fused[layer].parametrizations.values():
                mix = param[0].mix  # rows of other units stay as those units set them
                for row, u in rows:
                    mix[row] = p[row] if kept[u] else 0.0

    def deploy(self) -> dict[str, Any]:
        """Bake the fused filters into the convs and remove the pruned channels; returns ``kept_channels``."""
        for module in self.fused.values():
            for pname in list(module.parametrizations.keys()):
                parametrize.remove_parametrizations(module, pname, leave_parametrized=True)
        self.fused = {}
        return self.units.deploy()


def parametrize_original(module: nn.Module, name: str) -> torch.Tensor:
    """The raw (unfused) tensor of a parametrized parameter."""
    return module.parametrizations[name].original
