"""The sandwich rule with inplace distillation (Yu et al., "Universally Slimmable Networks", 2019).

Each training step trains the largest subnet on the labels, then the smallest and ``num_random_samples`` random
subnets on the labels *and* on the largest subnet's predictions (the distiller's teacher recorders watch the
largest subnet, its student recorders each other one). The subnets' losses are summed, each divided by the
number of subnets (MMRazor accumulates their gradients over one optimizer step), so
:func:`slimkit.training.fit`'s one backward per step trains them all. Shared by :class:`~.AutoSlim` (width
search) and :class:`~.BigNAS` (any mutables).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from slimkit.engines.nas.mutator import NasMutator, Subnet
from slimkit.errors import check_int
from slimkit.faces.mmrazor.base import labels_of
from slimkit.faces.mmrazor.distill import build_distiller
from slimkit.faces.mmrazor.nas.spos import SPOS
from slimkit.training.distill import ConfigurableDistiller

#: the distiller used when a config gives none: KL divergence between the whole model's outputs
DEFAULT_DISTILLER: dict[str, Any] = {
    "teacher_recorders": {"out": {"type": "ModuleOutputs", "source": ""}},
    "student_recorders": {"out": {"type": "ModuleOutputs", "source": ""}},
    "distill_losses": {"loss_kl": {"type": "KLDivergence", "tau": 1, "loss_weight": 1}},
    "loss_forward_mappings": {"loss_kl": {"preds_S": {"recorder": "out", "from_student": True},
                                          "preds_T": {"recorder": "out", "from_student": False}}}}


class SandwichNAS(SPOS):
    """A supernet trained with the sandwich rule and inplace distillation (see the module doc).

    ``distiller``: a :class:`~slimkit.training.distill.ConfigurableDistiller` or its config, recording the
    same architecture on both sides (default: :data:`DEFAULT_DISTILLER`). ``num_random_samples``: random
    subnets per step besides the largest and the smallest. ``sample_kinds`` lists what one step trains.
    Outside training, ``mode="loss"`` is the task loss of the active subnet (:meth:`set_subnet`).
    """

    def __init__(self, architecture: nn.Module | Mapping[str, Any],
                 mutator: NasMutator | Mapping[str, Any] | None = None,
                 distiller: ConfigurableDistiller | Mapping[str, Any] | None = None, num_random_samples: int = 2,
                 norm_training: bool = False, data_preprocessor: Any = None,
                 init_cfg: Mapping[str, Any] | None = None) -> None:
        check_int(f"{type(self).__name__}: num_random_samples", num_random_samples, 0)
        super().__init__(architecture, mutator, norm_training, data_preprocessor, init_cfg)
        self.distiller = build_distiller(DEFAULT_DISTILLER if distiller is None else distiller)
        self.distiller.prepare(self.distill_target(), self.distill_target())
        self.sample_kinds = ["max", "min", *(f"random{i}" for i in range(num_random_samples))]

    def distill_target(self) -> nn.Module:
        """The module whose layer names the distiller's recorders use (the architecture)."""
        return self.architecture

    def subnet_for(self, kind: str) -> Subnet:
        """The choices of one sandwich member: ``"max"``, ``"min"`` or a random one."""
        if kind == "max":
            return self.mutator.max_choices()
        if kind == "min":
            return self.mutator.min_choices()
        return self.sample_subnet()

    def before_subnet(self, kind: str) -> None:
        """Hook run after a subnet is set and before it trains (BigNAS turns drop path on for the largest)."""

    def loss(self, inputs: Any, data_samples: Any = None) -> dict[str, torch.Tensor]:
        """Training: ``<kind>_subnet.<loss>`` for every member of the sandwich; otherwise the active subnet's loss."""
        if not self.training:
            return self.student_loss(inputs, data_samples)[0]
        labels, share = labels_of(data_samples), 1.0 / len(self.sample_kinds)
        losses: dict[str, torch.Tensor] = {}
        for kind in self.sample_kinds:
            self.set_subnet(self.subnet_for(kind))
            self.before_subnet(kind)
            teacher = kind == "max"
            recording = self.distiller.teacher_recording() if teacher else self.distiller.student_recording()
            with recording as recorders:
                member, output = self.student_loss(inputs, data_samples)
                recorders.feed(inputs, data_samples, output, labels)
            if not teacher:
                member.update(self.distiller.compute_distill_losses())
            losses.update({f"{kind}_subnet.{k}": v * share for k, v in member.items()})
        return losses
