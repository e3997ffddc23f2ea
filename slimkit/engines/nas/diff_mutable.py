"""DiffMutableOP: a differentiable choice among candidate ops (DARTS, Liu et al. 2019; MMRazor's ``DiffMutableOP``).

The forward is the softmax(alpha)-weighted sum of every candidate's output, alpha being the op's architecture
parameters (one logit per candidate). They are kept as a *buffer* that requires gradients: saved with the model's
weights, moved with it, but not among ``model.parameters()`` -- so the weight optimizer of
:func:`slimkit.training.fit` never updates them; the DARTS algorithm steps them with its own optimizer on
held-out batches. ``export()`` (after :meth:`fix_argmax`, or whatever choice is set) is the chosen candidate
alone, as for :class:`~slimkit.engines.nas.OneShotMutableOP`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from slimkit.core.registry import register_component
from slimkit.engines.nas.mutables import OneShotMutableOP
from slimkit.errors import ConfigError, check_number


class ArchLogits:
    """Architecture logits ``arch_param`` kept as a buffer that requires gradients (see the module doc).

    Shared by :class:`DiffMutableOP` and :class:`~slimkit.engines.nas.DiffChoiceRoute`; ``arch_grad`` (set by the
    algorithm) says whether ``softmax(alpha)`` carries gradients to alpha; ``mixed`` names what alpha mixes.
    """

    arch_param: torch.Tensor
    arch_grad: bool
    mixed: str

    def init_arch_param(self, size: int) -> None:
        """Register ``size`` small random logits (as DARTS initialises them) and turn ``arch_grad`` on."""
        assert isinstance(self, nn.Module)
        self.register_buffer("arch_param", (1e-3 * torch.randn(size)).requires_grad_())
        self.arch_grad = True

    def arch_parameter(self) -> torch.Tensor:
        """The architecture logits as a leaf tensor that requires gradients (re-made leaf after a device move)."""
        alpha = self.arch_param
        if not alpha.is_leaf or not alpha.requires_grad:
            self.arch_param = alpha.detach().requires_grad_()
        return self.arch_param

    def weights(self) -> torch.Tensor:
        """``softmax(alpha)``: how much each candidate counts."""
        alpha = self.arch_parameter()
        return torch.softmax(alpha if self.arch_grad else alpha.detach(), dim=0)

    def mix(self, outputs: Iterable[tuple[str, torch.Tensor]], weights: torch.Tensor | None) -> torch.Tensor:
        """The sum of the named ``outputs``, each times its weight (unweighted when ``weights`` is None)."""
        total = None
        for i, (name, out) in enumerate(outputs):
            out = out if weights is None else weights[i] * out
            if total is not None and out.shape != total.shape:
                raise ConfigError(f"{type(self).__name__} {self.mixed} must give outputs of one shape: {name!r} gives "
                                  f"{tuple(out.shape)}, the ones before it {tuple(total.shape)}.")
            total = out if total is None else total + out
        return total

    def fix_argmax(self) -> Any:
        """Make the argmax choice the current one (and run it alone); returns it."""
        self.current_choice = self.argmax_choice()
        self.fixed = True
        return self.current_choice


class DiffMutableOP(ArchLogits, OneShotMutableOP):
    """Candidates mixed by ``softmax(arch_param)`` (see the module doc); ``fixed=True`` runs the current choice only.

    ``candidates`` / ``module_kwargs`` / ``alias`` as :class:`OneShotMutableOP`. Every candidate must give outputs
    of one shape. ``fix_threshold`` (MMRazor's, read by :class:`OneHotMutableOP`): once the largest probability
    leads the second by that much in training, the choice is fixed to it. ``arch_grad`` (set by the
    algorithm) says whether the mixing weights carry gradients to alpha.
    """

    mixed = "candidates"

    def __init__(self, candidates: Mapping[str, nn.Module | Mapping[str, Any]], init_choice: str | None = None,
                 module_kwargs: Mapping[str, Any] | None = None, fixed: bool = False, alias: str | None = None,
                 fix_threshold: float = 1.0) -> None:
        super().__init__(candidates, init_choice, module_kwargs, alias)
        self.fix_threshold = check_number(f"{type(self).__name__} fix_threshold", fix_threshold, 0, 1)
        self.init_arch_param(len(self.choices))
        self.fixed = bool(fixed)

    def canonical_choice(self, choice: Any) -> Any:
        """MMRazor's subnet files write a DiffMutableOP's choice as a one-element list (``chosen: [sep_conv_3x3]``)."""
        if isinstance(choice, (list, tuple)) and len(choice) == 1:
            return choice[0]
        return choice

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The weighted sum of every candidate's output (or the current choice's, when ``fixed``)."""
        if self.fixed:
            return super().forward(*args, **kwargs)
        return self.mix(((n, self.candidates[n](*args, **kwargs)) for n in self.choices), self.weights())

    def argmax_choice(self) -> str:
        """The candidate with the largest architecture weight."""
        return self.choices[int(self.arch_param.detach().argmax())]

    def extra_repr(self) -> str:
        """The choices, the mixing weights and whether the op is fixed."""
        probs = ", ".join(f"{c}={p:.3f}" for c, p in zip(self.choices, self.weights().tolist(), strict=True))
        return f"{probs}, fixed={self.fixed}"


register_component(DiffMutableOP, "mutable")


class OneHotMutableOP(DiffMutableOP):
    """DSNAS's choice (Hu et al., CVPR 2020; MMRazor's ``OneHotMutableOP``): one candidate runs per forward.

    In training, a candidate is drawn from ``softmax(alpha)`` (uniformly while ``uniform`` is set, for supernet
    pre-training) and its output is multiplied by a one-hot leaf tensor ``arch_weights`` (value 1), so the loss's
    gradient with respect to that one-hot vector is the credit DSNAS gives the draw. Outside training, or when
    ``fixed``, the current choice runs alone; a training forward whose largest probability leads the second by
    ``fix_threshold`` fixes the choice to it.
    """

    def __init__(self, candidates: Mapping[str, nn.Module | Mapping[str, Any]], init_choice: str | None = None,
                 module_kwargs: Mapping[str, Any] | None = None, fixed: bool = False, alias: str | None = None,
                 fix_threshold: float = 1.0) -> None:
        super().__init__(candidates, init_choice, module_kwargs, fixed, alias, fix_threshold)
        self.uniform = False
        self.arch_weights: torch.Tensor | None = None  # the latest draw's one-hot (a leaf with a gradient)
        self.drawn: int | None = None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The drawn candidate's output times its one-hot weight (training), else the current choice's."""
        if self.fixed or not self.training:
            return self.candidates[self.current_choice](*args, **kwargs)
        probs = torch.full((len(self.choices),), 1.0 / len(self.choices)) if self.uniform else self.weights().detach()
        if not self.uniform and len(self.choices) > 1:
            top = torch.topk(probs, 2).values
            if float(top[0] - top[1]) >= self.fix_threshold:  # confident enough: fixed from now on
                self.fix_argmax()
                return self.candidates[self.current_choice](*args, **kwargs)
        index = int(torch.multinomial(probs.float().cpu(), 1))
        self.current_choice, self.drawn = self.choices[index], index
        alpha = self.arch_parameter()
        self.arch_weights = torch.zeros(len(self.choices), device=alpha.device, dtype=alpha.dtype)
        self.arch_weights[index] = 1.0
        self.arch_weights.requires_grad_()
        return self.candidates[self.current_choice](*args, **kwargs) * self.arch_weights[index]

    def arch_gradient(self) -> torch.Tensor | None:
        """DSNAS's gradient of alpha for the latest draw: ``sum(dL/d one-hot) * (one-hot - softmax(alpha))``.

        ``None`` when no training forward and backward happened since the last call.
        """
        weights = self.arch_weights
        if weights is None or weights.grad is None or self.drawn is None:
            return None
        onehot = torch.zeros_like(weights)
        onehot[self.drawn] = 1.0
        grad = weights.grad.sum() * (onehot - torch.softmax(self.arch_parameter().detach(), dim=0))
        self.arch_weights = None
        return grad


register_component(OneHotMutableOP, "mutable")
