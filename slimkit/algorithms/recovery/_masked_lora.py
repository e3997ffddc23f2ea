"""MaskLoRA of PERP (not an algorithm): low-rank adapters whose update keeps a pruned weight's zeros.

A chosen Linear layer's weight becomes ``W0 + (alpha / r) * (B @ A) * M`` through a torch parametrization, with
``W0`` frozen, ``A`` and ``B`` trained and ``M`` the non-zero pattern of ``W0`` when the layer was pruned (all ones
when it has no zero). :func:`merge_adapters` removes the parametrizations and leaves the merged plain weight: the
same classes and parameter names as before, the zeros of the pruning kept, nothing of the adapters left over.
``variant="pissa"`` starts ``B @ A`` from the top singular directions of ``W0`` (PiSSA) and takes them out of the
frozen part, so the model computes exactly what it did before training either way.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.utils import parametrize

#: the adapter initialisations (Pruna's ``lora_variant`` choices)
VARIANTS: tuple[str, ...] = ("lora", "pissa")


class _MaskedLowRank(nn.Module):
    """The parametrization ``W -> W_frozen + scale * (B @ A) * mask`` of one Linear weight."""

    def __init__(self, weight: torch.Tensor, rank: int, scale: float, variant: str, generator: torch.Generator,
                 masked: bool) -> None:
        super().__init__()
        out_features, in_features = weight.shape
        w = weight.detach().float()
        self.scale = scale
        self.register_buffer("mask", (weight != 0).to(weight.dtype) if masked else None)
        if variant == "pissa":  # B @ A = the top-r singular part of W (Meng et al. 2024), taken out of the base
            u, s, v = torch.svd_lowrank(w, q=rank, niter=4)
            root = (s / scale).sqrt()
            b, a = u * root, (v * root).T
        else:  # LoRA: A ~ Kaiming-uniform, B = 0 (Hu et al. 2021), so training starts from W itself
            bound = 1.0 / math.sqrt(in_features)
            a = (torch.rand(rank, in_features, generator=generator) * 2 - 1) * bound
            b = torch.zeros(out_features, rank)
        self.lora_A = nn.Parameter(a.to(weight.dtype).to(weight.device).contiguous())
        self.lora_B = nn.Parameter(b.to(weight.dtype).to(weight.device).contiguous())
        self.register_buffer("offset", None if variant == "lora" else self.delta().detach())

    def delta(self) -> torch.Tensor:
        """The adapter's update of the weight, masked."""
        update = self.scale * (self.lora_B @ self.lora_A)
        return update if self.mask is None else update * self.mask

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        """The weight the layer computes with."""
        base = weight if self.offset is None else weight - self.offset
        return base + self.delta()


@dataclass
class AdapterReport:
    """What :func:`add_adapters` did: layers adapted, of them those masked, layers skipped and trainable count."""

    layers: list[str]
    masked: list[str]
    skipped: list[str]
    params: int


def add_adapters(model: nn.Module, names: list[str], rank: int, alpha_r_ratio: float, variant: str,
                 seed: int) -> AdapterReport:
    """Parametrize each named Linear layer with a rank-``rank`` MaskLoRA adapter; only the adapters train.

    A layer whose weight is not floating point (quantized) is skipped and reported. The base weights are frozen
    here; every other parameter keeps its ``requires_grad``.
    """
    generator = torch.Generator().manual_seed(seed)
    layers, masked, skipped, params = [], [], [], 0
    for name in names:
        module = model.get_submodule(name)
        weight = getattr(module, "weight", None)
        if not isinstance(module, nn.Linear) or not isinstance(weight, torch.Tensor) or not weight.is_floating_point():
            skipped.append(name)
            continue
        weight.requires_grad_(False)
        sparse = bool((weight == 0).any())
        adapter = _MaskedLowRank(weight, min(rank, *weight.shape), alpha_r_ratio, variant, generator, sparse)
        parametrize.register_parametrization(module, "weight", adapter)
        module.parametrizations.weight.original.requires_grad_(False)
        layers.append(name)
        masked += [name] if sparse else []
        params += adapter.lora_A.numel() + adapter.lora_B.numel()
    return AdapterReport(layers, masked, skipped, params)


def merge_adapters(model: nn.Module, names: list[str]) -> None:
    """Fold each adapter into its layer's weight and remove the parametrization (a plain Linear again)."""
    for name in names:
        module = model.get_submodule(name)
        with torch.no_grad():
            parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
        module.weight.requires_grad_(False)


@contextlib.contextmanager
def adapter_dropout(model: nn.Module, names: list[str], p: float) -> Iterator[None]:
    """LoRA dropout while training: the adapters of ``names`` see ``dropout(x)``, the frozen weights ``x``.

    A forward hook adds ``(dropout(x) - x) @ delta.T`` to each adapted layer's output in train mode, which is
    exactly ``x @ W0.T + dropout(x) @ delta.T``; removed on exit.
    """

    def hook(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor:
        if not module.training:
            return output
        x = args[0]
        return output + nn.functional.linear(nn.functional.dropout(x, p, True) - x,
                                             module.parametrizations.weight[0].delta())

    handles = [model.get_submodule(n).register_forward_hook(hook) for n in names] if p > 0 else []
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
