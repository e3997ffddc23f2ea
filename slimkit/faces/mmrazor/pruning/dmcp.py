"""DMCP: MMRazor's differentiable Markov channel pruning on slimkit's training loop."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from slimkit.engines.pruning.dmcp import FLOPS_LOSSES, DMCPSearch, flops_loss
from slimkit.errors import ConfigError, check_int, check_number
from slimkit.faces.mmrazor.builder import build, register_module
from slimkit.faces.mmrazor.pruning.base import PruningAlgorithm
from slimkit.faces.mmrazor.pruning.mutators import DMCPChannelMutator
from slimkit.utils import main_tensor

STRATEGIES = ("max", "min", "arch_random", "scheduled_random")


def _distill_loss(distiller: Any) -> nn.Module | None:
    if distiller is None:
        return None
    losses = distiller.get("distill_losses") if isinstance(distiller, Mapping) else None
    if not isinstance(losses, Mapping) or len(losses) != 1 or not isinstance(next(iter(losses.values())), Mapping):
        raise ConfigError("DMCP distiller must be dict(type='ConfigurableDistiller', distill_losses=dict(<name>="
                          "dict(type='KLDivergence', ...)), ...) with one loss: the widest subnet's output teaches "
                          f"the others; got {distiller!r}.")
    return build(next(iter(losses.values())))


@register_module()
class DMCP(PruningAlgorithm):
    """Differentiable Markov channel pruning (Guo et al., CVPR 2020; MMRazor's ``DMCP``).

    Every training step sums the task losses of the subnets ``strategy`` names: ``max``, ``min``,
    ``arch_random`` (a random width, or after ``arch_start_train`` steps one walked from the Markov chain),
    ``scheduled_random`` (random with a probability decaying by 0.9999 a step); after ``distillation_times``
    steps the widest subnet's output teaches the others through ``distiller``'s loss (in-place distillation;
    its recorders are read as the architecture's output). From ``arch_start_train`` on, every
    ``arch_train_freq`` steps the architecture parameters learn from the widest net under the soft expected
    masks and from a FLOPs loss pulling the expected MACs to ``target_flops`` (millions); that term's
    gradient reaches the architecture parameters only, as MMRazor's separate optimizer does.
    :meth:`deploy` keeps each unit's rounded expected width (:mod:`slimkit.engines.pruning.dmcp`).
    """

    mutator_class = DMCPChannelMutator
    default_mutator = {"type": "DMCPChannelMutator"}

    def __init__(self, architecture: nn.Module | Mapping[str, Any], distiller: Any = None,
                 mutator_cfg: Any = None, data_preprocessor: Any = None,
                 strategy: list[str] | tuple[str, ...] = ("max", "min", "arch_random"),
                 init_cfg: Mapping[str, Any] | None = None, arch_start_train: int = 10000,
                 arch_train_freq: int = 500, distillation_times: int = 20000, target_flops: float = 150,
                 flops_loss_type: str = "log_l1", flop_loss_weight: float = 1.0, dummy_input: Any = None) -> None:
        bad = [s for s in strategy if s not in STRATEGIES] if isinstance(strategy, (list, tuple)) else [strategy]
        if bad or not strategy:
            raise ConfigError(f"DMCP strategy entries must be among {', '.join(STRATEGIES)}, got {strategy!r}.")
        if flops_loss_type not in FLOPS_LOSSES:
            raise ConfigError(f"DMCP flops_loss_type must be one of {', '.join(FLOPS_LOSSES)}, got "
                              f"{flops_loss_type!r}.")
        for name, value in (("arch_start_train", arch_start_train), ("arch_train_freq", arch_train_freq),
                            ("distillation_times", distillation_times)):
            check_int(f"DMCP {name}", value, 1 if name == "arch_train_freq" else 0)
        check_number("DMCP target_flops", target_flops, 0, open_low=True, meaning="MFLOPs, counted as MACs")
        check_number("DMCP flop_loss_weight", flop_loss_weight, 0.0)
        super().__init__(architecture, mutator_cfg, data_preprocessor, init_cfg, dummy_input)
        self.search = DMCPSearch(self.units, self.mutator.pruning_cfg)
        self.strategy, self.arch_start_train, self.arch_train_freq = list(strategy), arch_start_train, arch_train_freq
        self.distillation_times, self.target_flops = distillation_times, float(target_flops)
        self.flops_loss_type, self.flop_loss_weight = flops_loss_type, float(flop_loss_weight)
        self.distill_loss = _distill_loss(distiller)
        self.cur_sample_prob = 1.0

    @property
    def arch_train(self) -> bool:
        """Whether the architecture parameters train yet."""
        return self.iteration > self.arch_start_train

    def _mode(self, kind: str) -> str:
        if kind in ("max", "min"):
            return kind
        if kind == "scheduled_random":
            mode = "direct" if self.arch_train and torch.rand(()) > self.cur_sample_prob else "random"
            self.cur_sample_prob *= 0.9999
            return mode
        return "direct" if self.arch_train else "random"

    def loss(self, inputs: Any, data_samples: Any = None) -> dict[str, torch.Tensor]:
        """The subnets' losses (training), or the current subnet's task loss (eval)."""
        self._check_live()
        if not self.training:
            return self.student_loss(inputs, data_samples)[0]
        self.iteration += 1
        total: dict[str, torch.Tensor] = {}
        teacher = None
        for i, kind in enumerate(self.strategy):
            self.search.set_subnet(self._mode(kind))
            losses, output = self.student_loss(inputs, data_samples)
            if kind == "max" and output is not None:
                teacher = main_tensor(output).detach()
            elif self.distill_loss is not None and teacher is not None and output is not None \
                    and self.iteration > self.distillation_times:
                losses["loss_distill"] = self.distill_loss(main_tensor(output), teacher)
            total.update({f"{kind}_subnet{i}.{k}": v for k, v in losses.items()})
        if self.arch_train and self.iteration % self.arch_train_freq == 0:
            total.update(self.arch_losses(inputs, data_samples))
        self.search.set_subnet("max")
        return total

    def arch_losses(self, inputs: Any, data_samples: Any) -> dict[str, torch.Tensor]:
        """The architecture step: the widest net under the expected masks (eval mode) and the FLOPs loss."""
        params = list(self.search.arch_params.values())
        was = self.architecture.training
        self.architecture.eval()
        try:
            self.search.set_subnet("expected")
            arch = sum(self.student_loss(inputs, data_samples)[0].values())
        finally:
            self.architecture.train(was)
        grads = torch.autograd.grad(arch, params, allow_unused=True)
        surrogate = sum((p * g.detach()).sum() for p, g in zip(params, grads, strict=True) if g is not None)
        surrogate = surrogate if isinstance(surrogate, torch.Tensor) else torch.zeros(())
        flops = flops_loss(self.search.expected_macs() / 1e6, self.target_flops, self.flops_loss_type)
        return {"arch.loss": surrogate - surrogate.detach() + arch.detach(),
                "flops.loss": flops * self.flop_loss_weight}

    def finish(self) -> dict[str, Any]:
        """Keep each unit's rounded expected width (its first channels) and remove the rest."""
        for name, width in self.search.export_widths().items():
            self.units.choose(self.units.resolve(name), width, "sequential")
        return self.units.deploy()
