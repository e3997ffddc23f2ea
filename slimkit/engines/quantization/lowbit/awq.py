"""AWQ (Lin et al., 2023): activation-aware per-input-channel scaling before group-wise RTN.

Weights that meet large activations matter most. AWQ multiplies input channel ``c`` of a layer's weight by
``s_c`` and divides the layer's input by ``s_c`` (the product is unchanged), so salient channels get more of
the quantization grid. ``s = mean|x|^alpha`` (normalised), with ``alpha`` picked on a grid to minimise the
layers' output error ``||x W^T - (x / s) Q(W s)^T||^2`` on calibration activations. Layers fed the same tensor
(e.g. q/k/v) share one ``s``. Only ``X^T X`` and ``mean|x|`` of the calibration inputs are kept, so every
calibration token counts and memory stays at one ``[in, in]`` matrix per layer group.

The ``1 / s`` on the input is folded into whatever produced it where that is exact: the weight (and bias) of
a preceding RMSNorm/LayerNorm, or the output rows of a preceding Linear (including a gated MLP's ``up_proj``
feeding ``down_proj``). Where nothing can absorb it, the packed layer keeps an ``input_scale`` buffer.
"""

from __future__ import annotations

import torch
from torch import nn

from slimkit.engines.quantization.lowbit.layers import in_out, is_dense, weight_of
from slimkit.engines.quantization.lowbit.rtn import fake_quantize


class ActivationStats:
    """Running ``X^T X / n`` and ``mean |x|`` per input channel of one layer group's calibration inputs."""

    def __init__(self, in_features: int, device: torch.device | str = "cpu") -> None:
        self.gram = torch.zeros(in_features, in_features, device=device)
        self.abs_sum = torch.zeros(in_features, device=device)
        self.count = 0

    def add(self, x: torch.Tensor) -> None:
        """Add a batch of inputs ``[..., in_features]``."""
        rows = x.detach().reshape(-1, x.shape[-1]).float()
        self.gram.addmm_(rows.t(), rows)
        self.abs_sum.add_(rows.abs().sum(0))
        self.count += rows.shape[0]

    @property
    def h(self) -> torch.Tensor:
        """``X^T X / n``: the output error of a weight change ``D`` is ``trace(D h D^T)`` per token."""
        return self.gram / max(self.count, 1)

    @property
    def act(self) -> torch.Tensor:
        """Mean absolute activation per input channel."""
        return self.abs_sum / max(self.count, 1)


def output_error(delta: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Mean squared output change per token, ``trace(delta h delta^T)``, for a weight change ``delta [out, in]``.

    A 0-d tensor on ``delta``'s device (no host round trip: a scale search compares all its candidates at once).
    """
    return ((delta @ h) * delta).sum()


def search_scale(
    stats: ActivationStats, weights: list[torch.Tensor], bits: int, group_size: int, sym: bool, n_grid: int = 10
) -> tuple[torch.Tensor, float]:
    """Best per-channel scale ``s [in]`` for layers ``weights`` (each ``[out_i, in]``) sharing inputs ``stats``.

    Candidates are ``mean|x|^alpha`` and, as in later AWQ versions, ``mean|x|^alpha / mean|w|^(1 - alpha)`` with
    ``mean|w|`` the per-channel weight magnitude relative to each row's maximum, for ``alpha`` on a grid in
    [0, 1). The error of each is the exact output error on all calibration tokens, ``trace(D h D^T)`` with
    ``D = Q(W s) / s - W``. Returns ``(s, alpha)``; ``s = 1`` (plain RTN) is a candidate, so AWQ never does
    worse than RTN on the calibration activations. The errors stay on the weights' device until the one
    comparison at the end (the first of equal errors wins).
    """
    h, act = stats.h, stats.act.clamp(min=1e-5)
    w_all = torch.cat([w.float() for w in weights], dim=0)
    w_mag = (w_all.abs() / w_all.abs().amax(dim=1, keepdim=True).clamp(min=1e-8)).mean(0).clamp(min=1e-5)
    candidates, errors = [], []
    for duo in (False, True):
        for step in range(n_grid):
            alpha = step / n_grid
            s = act.pow(alpha) / (w_mag.pow(1 - alpha) if duo else 1.0)
            s = s / (s.max() * s.min()).sqrt()
            deq = torch.cat([fake_quantize(w.float() * s, bits, group_size, sym) for w in weights], dim=0)
            candidates.append((s, alpha))
            errors.append(output_error(deq / s - w_all, h))
    if not candidates:
        return torch.ones_like(act), 0.0
    best = int(torch.stack(errors).nan_to_num(nan=float("inf")).argmin())
    return candidates[best]


def _norm_weight(module: nn.Module, width: int) -> nn.Parameter | None:
    """The elementwise weight of a norm layer of ``width`` channels (RMSNorm, LayerNorm...), else None."""
    weight = getattr(module, "weight", None)
    if is_dense(module) or not isinstance(weight, nn.Parameter) or tuple(weight.shape) != (width,):
        return None
    if any(True for _ in module.children()):
        return None
    return weight


def fold_target(model: nn.Module, names: list[str], producer: str | None) -> nn.Module | None:
    """The module that can absorb ``1 / s`` for layers ``names``: a norm, or a Linear producing their input."""
    width = in_out(model.get_submodule(names[0]))[0]
    if producer is not None:
        module = model.get_submodule(producer)
        if _norm_weight(module, width) is not None:
            return module
        if is_dense(module) and in_out(module)[1] == width:
            return module
    last = names[0].rsplit(".", 1)
    if len(names) == 1 and last[-1] == "down_proj":  # gated MLP: down(act(gate(x)) * up(x)) is linear in up
        parent = model.get_submodule(last[0])
        up = getattr(parent, "up_proj", None)
        if up is not None and is_dense(up) and in_out(up)[1] == width:
            return up
    return None


@torch.no_grad()
def fold_inverse_scale(target: nn.Module, s: torch.Tensor) -> None:
    """Divide ``target``'s output channels by ``s`` (norm weight and bias, or a Linear's rows and bias)."""
    if is_dense(target):
        w = weight_of(target)
        w.div_(s.to(w.dtype).unsqueeze(1))
    else:
        target.weight.div_(s.to(target.weight.dtype))
    bias = getattr(target, "bias", None)
    if isinstance(bias, torch.Tensor):
        bias.div_(s.to(bias.dtype))


@torch.no_grad()
def scale_weight(module: nn.Module, s: torch.Tensor) -> None:
    """Multiply input channel ``c`` of ``module``'s weight by ``s_c`` in place."""
    w = weight_of(module)
    w.mul_(s.to(w.dtype).unsqueeze(0))
