"""StagedBackbone: what MMCls-style supernet backbones share -- a stem, stages, ``out_indices``, frozen stages."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.core.registry import build_component
from slimkit.errors import ConfigError


def mutable_stage(mutable_cfg: Mapping[str, Any], in_channels: int, out_channels: int, num_blocks: int,
                  stride: int) -> nn.Sequential:
    """``num_blocks`` mutables built from ``mutable_cfg``, each told its channels and stride (the first strides)."""
    return nn.Sequential(*(build_component({**mutable_cfg, "module_kwargs": {
        "in_channels": in_channels if j == 0 else out_channels, "out_channels": out_channels,
        "stride": stride if j == 0 else 1}}) for j in range(num_blocks)))


class StagedBackbone(nn.Module):
    """A stem then stages; ``forward`` returns the outputs of the stages in ``out_indices`` (a tuple).

    Subclasses set ``out_indices``, ``frozen_stages`` (the stem and that many stages are frozen: eval mode, no
    gradients; -1 freezes nothing) and ``norm_eval`` (batch norms stay in eval mode while training) through
    :meth:`check_stages`, name the stem's attribute ``stem_name`` and the stages' ``layer_names`` (or override
    :meth:`stages`); they call :meth:`_freeze` at the end of ``__init__``.
    """

    out_indices: tuple[int, ...] = ()
    frozen_stages: int = -1
    norm_eval: bool = False
    stem_name = "conv1"
    layer_names: list[str]

    def check_stages(self, num_layers: int, out_indices: Sequence[int], frozen_stages: int, norm_eval: bool) -> None:
        """Keep ``out_indices``, ``frozen_stages`` and ``norm_eval``; the first two must lie in ``0..num_layers-1``."""
        if any(i not in range(num_layers) for i in out_indices) or frozen_stages not in range(-1, num_layers):
            raise ConfigError(f"{type(self).__name__}: out_indices {list(out_indices)} and frozen_stages "
                              f"{frozen_stages} must lie in 0..{num_layers - 1}.")
        self.out_indices, self.frozen_stages, self.norm_eval = tuple(out_indices), frozen_stages, bool(norm_eval)

    def stem(self) -> nn.Module:
        """The first layer (the attribute ``stem_name``: a 3x3 stride-2 conv)."""
        return getattr(self, self.stem_name)

    def stages(self) -> list[nn.Module]:
        """The layers after the stem, in order (their indices are what ``out_indices`` names)."""
        return [getattr(self, name) for name in self.layer_names]

    def _freeze(self) -> None:
        frozen = ([self.stem()] if self.frozen_stages >= 0 else []) + self.stages()[: max(self.frozen_stages, 0)]
        for module in frozen:
            module.eval()
            for p in module.parameters():
                p.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The outputs of the stages in ``out_indices``."""
        x = self.stem()(x)
        outs = []
        for i, stage in enumerate(self.stages()):
            x = stage(x)
            if i in self.out_indices:
                outs.append(x)
        return tuple(outs)

    def train(self, mode: bool = True) -> StagedBackbone:
        """Train mode, keeping frozen stages (and, with ``norm_eval``, batch norms) in eval mode."""
        super().train(mode)
        self._freeze()
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.eval()
        return self
