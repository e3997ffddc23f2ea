"""Multiply-accumulates of a model as a function of how many output channels each layer keeps.

One forward pass on ``dummy_input`` records every Conv/Linear layer's MACs (output elements times the
weights each one reads; for a transposed conv, input elements times the weights each one writes to); the
channel tracer (:class:`~slimkit.engines.pruning.coupling.ChannelCoupling`) tells which input positions of
which layers carry each producer's channels. Keeping a fraction ``k`` of a layer's outputs scales its own MACs
by ``k`` and removes the matching share of its readers' inputs, so

    MACs(keep) = sum over layers L of  full(L) * keep(L) * (1 - removed input share of L).

This is what :func:`slimkit.evaluation.count_macs` measures after ``ModelSpeedup`` on chains of layers; where
channels are coupled (residual adds) an input position counts as removed in proportion to each producer's
pruning, an estimate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from slimkit.engines.pruning.coupling import ChannelCoupling
from slimkit.engines.speedup.layers import CONV_TYPES, DECONV_TYPES
from slimkit.evaluation.runtime import eval_mode
from slimkit.utils import run_model

_LAYERS = (*CONV_TYPES, *DECONV_TYPES, nn.Linear)


class ChannelMacs:
    """MACs of ``model`` on ``dummy_input`` under per-layer output keep fractions (see the module docstring)."""

    def __init__(self, model: nn.Module, dummy_input: Any, layers: Iterable[str] | None = None) -> None:
        self.full: dict[str, int] = {}
        handles = []
        for name, module in model.named_modules():
            if isinstance(module, _LAYERS):
                handles.append(module.register_forward_hook(self._hook(name)))
        try:
            with eval_mode(model), torch.no_grad():
                run_model(model, dummy_input)
        finally:
            for handle in handles:
                handle.remove()
        coupling = ChannelCoupling(model, dummy_input)
        #: the channel tracer (which layers the speedup can shrink)
        self.coupling = coupling
        self.layers = list(self.full) if layers is None else list(layers)
        #: reader -> [(producer, share of the reader's inputs that carry the producer's channels)]
        self.reads: dict[str, list[tuple[str, float]]] = {}
        for producer in self.layers:
            for reader, module, _, positions in coupling.consumers(producer):
                width = module.in_features if isinstance(module, nn.Linear) else getattr(module, "in_channels", 0)
                if width and reader in self.full:
                    share = len(set(positions.tolist())) / width
                    self.reads.setdefault(reader, []).append((producer, share))
        self.total = sum(self.full.values())

    def _hook(self, name: str) -> Any:
        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            counted = args[0] if isinstance(module, DECONV_TYPES) and args else output  # the side weight[0] pairs with
            if isinstance(counted, torch.Tensor):
                self.full[name] = self.full.get(name, 0) + counted.numel() * module.weight[0].numel()

        return hook

    def macs(self, keep: Mapping[str, float]) -> float:
        """Estimated MACs when layer ``n`` keeps the fraction ``keep[n]`` of its output channels (others: all)."""
        return sum(self.layer_macs(name, keep) for name in self.full)

    def layer_macs(self, name: str, keep: Mapping[str, float]) -> float:
        """Estimated MACs of one layer under ``keep``."""
        removed = sum(share * (1.0 - float(keep.get(p, 1.0))) for p, share in self.reads.get(name, ()))
        return self.full.get(name, 0) * float(keep.get(name, 1.0)) * max(0.0, 1.0 - removed)
