"""The generator objectives of DAFL (Chen et al., ICCV 2019, arXiv:1904.01186), on the teacher's outputs.

A data-free generator is trained so that the teacher is confident on its images (:class:`OnehotLikeLoss`),
its classes are balanced over a batch (:class:`InformationEntropyLoss`) and its features are strongly
activated (:class:`ActivationLoss`). They read teacher recorders only.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F

from slimkit.core.registry import register_component
from slimkit.errors import ConfigError
from slimkit.training.distill.losses.base import DistillLoss


class OnehotLikeLoss(DistillLoss):
    """Cross-entropy of the teacher's logits against their own argmax (confident, one-hot-like outputs)."""

    same_shape: ClassVar[bool] = False

    def forward(self, preds_T: torch.Tensor) -> torch.Tensor:  # noqa: N803 (MMRazor names)
        """The weighted one-hot loss."""
        logits = preds_T.float()
        return self.loss_weight * F.cross_entropy(logits, logits.detach().argmax(dim=1))


class InformationEntropyLoss(DistillLoss):
    """The negative entropy (base 10) of the teacher's batch-mean class distribution: minimising balances classes.

    ``gather`` is accepted for MMRazor configs; slimkit trains in one process, so the batch is the whole batch.
    """

    same_shape: ClassVar[bool] = False

    def __init__(self, loss_weight: float = 1.0, gather: bool = True) -> None:
        super().__init__(loss_weight)
        self.gather = bool(gather)

    def forward(self, preds_T: torch.Tensor) -> torch.Tensor:  # noqa: N803 (MMRazor names)
        """The weighted ``sum(p * log10 p)`` of the mean class probabilities."""
        p = F.softmax(preds_T.float(), dim=1).mean(dim=0)
        return self.loss_weight * (p * torch.log10(p.clamp(min=1e-12))).sum()


class ActivationLoss(DistillLoss):
    """Minus the activation of the teacher's features: ``-mean|f|`` (``norm_type="abs"``) or ``-||f||``."""

    same_shape: ClassVar[bool] = False

    def __init__(self, loss_weight: float = 1.0, norm_type: str = "abs") -> None:
        super().__init__(loss_weight)
        if norm_type not in ("abs", "norm"):
            raise ConfigError(f"ActivationLoss: norm_type must be 'abs' or 'norm', got {norm_type!r}.")
        self.norm_type = norm_type

    def forward(self, feat_T: torch.Tensor) -> torch.Tensor:  # noqa: N803 (MMRazor names)
        """The weighted negative activation."""
        flat = feat_T.float().flatten(1)
        return self.loss_weight * (-flat.norm() if self.norm_type == "norm" else -flat.abs().mean())


for _cls in (OnehotLikeLoss, InformationEntropyLoss, ActivationLoss):
    register_component(_cls, "loss")
