"""CRDLoss: contrastive representation distillation (Tian, Krishnan & Isola, ICLR 2020, arXiv:1910.10699)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import nn

from slimkit.core.registry import register_component
from slimkit.errors import ConfigError
from slimkit.training.distill.losses.base import DistillLoss, positive

_NEEDS_INDEX = ("CRDLoss needs each sample's index in the training set (its memory bank holds one embedding per "
                "sample): give batches (inputs, {'labels': y, 'sample_idx': i}) -- i the dataset positions of the "
                "batch -- and map data_samples from a ModuleInputs recorder on '' with data_idx=1.")


def sample_indices(data_samples: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(``sample_idx`` [N], ``contrast_sample_idxs`` [N, K+1] or None) from the data samples of a batch."""
    def field(obj: Any, name: str) -> Any:
        return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)

    if isinstance(data_samples, (Mapping,)) or hasattr(data_samples, "sample_idx"):
        idx, contrast = field(data_samples, "sample_idx"), field(data_samples, "contrast_sample_idxs")
    elif isinstance(data_samples, Sequence) and data_samples and field(data_samples[0], "sample_idx") is not None:
        idx = torch.stack([torch.as_tensor(field(s, "sample_idx")) for s in data_samples])
        first = field(data_samples[0], "contrast_sample_idxs")
        contrast = None if first is None else torch.stack([torch.as_tensor(field(s, "contrast_sample_idxs"))
                                                           for s in data_samples])
    else:
        raise ConfigError(f"{_NEEDS_INDEX} Got {type(data_samples).__name__}.")
    if idx is None:
        raise ConfigError(_NEEDS_INDEX)
    return torch.as_tensor(idx).long().reshape(-1), None if contrast is None else torch.as_tensor(contrast).long()


class CRDLoss(DistillLoss):
    """Noise-contrastive estimation between student and teacher embeddings, with a memory bank per network.

    ``s_feats`` / ``t_feats``: ``[N, dim_out]`` embeddings (the outputs of ``CRDConnector``s, L2-normalised);
    ``data_samples``: the batch's dataset indices (see :func:`sample_indices`). For each sample the positive is
    the other network's stored embedding of the same sample, and ``neg_num`` negatives are drawn uniformly
    from the ``sample_n`` stored ones (or given as ``contrast_sample_idxs``). Scores ``exp(<a, b> / temperature)``
    are normalised by a constant fixed on the first batch; the banks move toward the new embeddings with
    ``momentum``. The loss is the NCE loss of both directions, times ``loss_weight``.
    """

    same_shape: ClassVar[bool] = False

    def __init__(self, loss_weight: float = 1.0, temperature: float = 0.07, neg_num: int = 16384,
                 sample_n: int = 50000, dim_out: int = 128, momentum: float = 0.5, eps: float = 1e-7) -> None:
        super().__init__(loss_weight)
        self.temperature = positive("CRDLoss", temperature, "temperature")
        self.neg_num, self.sample_n = int(positive("CRDLoss", neg_num, "neg_num")), int(
            positive("CRDLoss", sample_n, "sample_n"))
        self.momentum, self.eps = float(momentum), positive("CRDLoss", eps, "eps")
        std = 1.0 / math.sqrt(dim_out / 3)
        self.register_buffer("memory_s", torch.rand(self.sample_n, int(dim_out)) * 2 * std - std)
        self.register_buffer("memory_t", torch.rand(self.sample_n, int(dim_out)) * 2 * std - std)
        self.register_buffer("norm_const", torch.full((2,), -1.0))  # Z of the student and teacher scores

    def _nce(self, scores: torch.Tensor) -> torch.Tensor:
        """NCE loss of ``scores`` [N, K+1] (column 0 the positive) against uniform noise over the bank."""
        k, noise = scores.shape[1] - 1, 1.0 / self.sample_n
        pos = scores[:, 0]
        log_d1 = torch.log(pos / (pos + k * noise + self.eps))
        log_d0 = torch.log((k * noise) / (scores[:, 1:] + k * noise + self.eps))
        return -(log_d1.sum() + log_d0.sum()) / scores.shape[0]

    def forward(self, s_feats: torch.Tensor, t_feats: torch.Tensor, data_samples: Any) -> torch.Tensor:
        """The weighted two-way NCE loss; updates the memory banks."""
        idx, contrast = sample_indices(data_samples)
        s, t = s_feats.float().flatten(1), t_feats.float().flatten(1)
        if len(idx) != len(s) or s.shape[1] != self.memory_s.shape[1] or t.shape[1] != self.memory_t.shape[1]:
            raise ConfigError(f"CRDLoss(dim_out={self.memory_s.shape[1]}) got {len(idx)} indices, student "
                              f"embeddings {tuple(s.shape)} and teacher embeddings {tuple(t.shape)}; the "
                              "connectors' dim_out must equal the loss's, one index per sample.")
        if int(idx.max()) >= self.sample_n or int(idx.min()) < 0:
            raise ConfigError(f"CRDLoss(sample_n={self.sample_n}) got sample index {int(idx.max())}; sample_n must "
                              "be the size of the training set.")
        idx = idx.to(s.device)
        if contrast is None:
            contrast = torch.randint(self.sample_n, (len(idx), self.neg_num + 1), device=s.device)
            contrast[:, 0] = idx
        bank_s = self.memory_s[contrast.to(s.device)].detach()  # [N, K+1, D]
        bank_t = self.memory_t[contrast.to(s.device)].detach()
        out_t = torch.exp(torch.bmm(bank_s, t.unsqueeze(2)).squeeze(2) / self.temperature)
        out_s = torch.exp(torch.bmm(bank_t, s.unsqueeze(2)).squeeze(2) / self.temperature)
        if float(self.norm_const[0]) < 0:
            self.norm_const.copy_(torch.stack([out_s.mean().detach(), out_t.mean().detach()]) * self.sample_n)
        out_s, out_t = out_s / self.norm_const[0], out_t / self.norm_const[1]
        with torch.no_grad():
            for bank, new in ((self.memory_s, s), (self.memory_t, t)):
                moved = bank[idx] * self.momentum + new.detach() * (1 - self.momentum)
                bank.index_copy_(0, idx, nn.functional.normalize(moved, dim=1))
        return self.loss_weight * (self._nce(out_s) + self._nce(out_t))


register_component(CRDLoss, "loss")
