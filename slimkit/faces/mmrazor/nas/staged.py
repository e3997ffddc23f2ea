"""StagedBackbone: what MMCls-style supernet backbones share -- a stem, stages, ``out_indices``, frozen stages."""

from __future__ import annotations

import torch
from torch import nn


class StagedBackbone(nn.Module):
    """A stem then stages; ``forward`` returns the outputs of the stages in ``out_indices`` (a tuple).

    Subclasses set ``out_indices``, ``frozen_stages`` (the stem and that many stages are frozen: eval mode, no
    gradients; -1 freezes nothing) and ``norm_eval`` (batch norms stay in eval mode while training), and define
    :meth:`stem` and :meth:`stages`; they call :meth:`_freeze` at the end of ``__init__``.
    """

    out_indices: tuple[int, ...] = ()
    frozen_stages: int = -1
    norm_eval: bool = False

    def stem(self) -> nn.Module:
        """The first layer."""
        raise NotImplementedError

    def stages(self) -> list[nn.Module]:
        """The layers after the stem, in order (their indices are what ``out_indices`` names)."""
        raise NotImplementedError

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
