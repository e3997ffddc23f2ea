"""Cross-entropy against the teacher: soft targets (``KDSoftCELoss``) or its argmax (``CrossEntropyLoss``).

``KDSoftCELoss`` is Hinton's KD written as a soft cross-entropy, ``-sum(softmax(T / tau) * log_softmax(S /
tau))`` per sample (times ``tau**2``): it differs from :class:`~.KLDivergence` by the teacher's entropy, a
constant for the student. ``CrossEntropyLoss`` (MMRazor's, used by self-distillation configs where the
"teacher" side is the labels or the deepest classifier) trains the student on ``argmax`` of ``preds_T``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from slimkit.core.registry import register_component
from slimkit.errors import ConfigError
from slimkit.training.distill.losses.base import DistillLoss, check_pair, class_dim, positive, reduction_of


class KDSoftCELoss(DistillLoss):
    """``tau**2 * mean_N(-sum_C softmax(preds_T / tau) * log_softmax(preds_S / tau))`` (MMRazor's ``KDSoftCELoss``).

    ``reduction``: ``"mean"`` (default) averages over samples, ``"sum"`` sums them, ``"none"`` keeps one value
    per sample. ``weight`` (per sample) and ``avg_factor`` (divide the sum by it instead of ``N``) as in MMCls's
    soft cross-entropy; ``mult_tem_square=False`` drops the ``tau**2`` factor.
    """

    def __init__(self, tau: float = 1.0, reduction: str = "mean", mult_tem_square: bool = True,
                 loss_weight: float = 1.0) -> None:
        super().__init__(loss_weight)
        self.tau = positive("KDSoftCELoss", tau, "tau (the temperature)")
        if reduction == "batchmean":
            raise ConfigError("KDSoftCELoss: reduction must be 'mean', 'sum' or 'none' (it is already per sample), "
                              "got 'batchmean'.")
        self.reduction = "none" if reduction is None else reduction_of("KDSoftCELoss", reduction)
        self.mult_tem_square = bool(mult_tem_square)

    def forward(self, preds_S: torch.Tensor, preds_T: torch.Tensor, weight: torch.Tensor | None = None,  # noqa: N803
                avg_factor: float | None = None, reduction_override: str | None = None) -> torch.Tensor:
        """The weighted soft cross-entropy of student logits ``preds_S`` against teacher logits ``preds_T``."""
        check_pair("KDSoftCELoss", preds_S, preds_T)
        reduction = reduction_of("KDSoftCELoss", reduction_override) if reduction_override else self.reduction
        dim = class_dim(preds_S)
        soft = F.softmax(preds_T.detach().float() / self.tau, dim=dim)
        per_sample = -(soft * F.log_softmax(preds_S.float() / self.tau, dim=dim)).sum(dim=dim)
        if weight is not None:
            per_sample = per_sample * weight.float()
        if reduction == "sum":
            value = per_sample.sum()
        elif reduction in ("mean", "batchmean"):
            value = per_sample.sum() / avg_factor if avg_factor is not None else per_sample.mean()
        else:
            value = per_sample
        return self.loss_weight * (self.tau**2 if self.mult_tem_square else 1.0) * value


class CrossEntropyLoss(DistillLoss):
    """Cross-entropy of student logits against a target class: the one ``preds_T`` scores highest (detached).

    MMRazor's ``CrossEntropyLoss`` takes ``preds_S`` / ``preds_T``; MMCls's (``mmcls.CrossEntropyLoss``, which
    self-distillation configs map as ``cls_score`` / ``label``) takes the labels. Both spellings are this loss:
    integer labels are used as they are, logits or one-hot scores through their argmax.
    """

    same_shape = False
    #: the argument names a distiller may map (either pair)
    argument_sets = (("preds_S", "preds_T"), ("cls_score", "label"))

    def forward(self, preds_S: torch.Tensor | None = None, preds_T: torch.Tensor | None = None,  # noqa: N803
                cls_score: torch.Tensor | None = None, label: torch.Tensor | None = None) -> torch.Tensor:
        """``loss_weight * cross_entropy(logits, target)``."""
        logits = preds_S if preds_S is not None else cls_score
        target = preds_T if preds_T is not None else label
        if not isinstance(logits, torch.Tensor) or not isinstance(target, torch.Tensor):
            raise ConfigError("CrossEntropyLoss takes (preds_S, preds_T) or (cls_score, label) tensors, got "
                              f"{type(logits).__name__} and {type(target).__name__}.")
        if logits.dim() < 2:
            raise ConfigError("CrossEntropyLoss needs logits [N, C] (or [N, C, ...]), "
                              f"got shape {tuple(logits.shape)}.")
        if target.is_floating_point():
            check_pair("CrossEntropyLoss", logits, target)
            target = target.detach().argmax(dim=1)
        elif tuple(target.shape) != (logits.shape[0], *logits.shape[2:]):
            if target.numel() != logits.shape[0] or logits.dim() != 2:
                raise ConfigError(f"CrossEntropyLoss: labels of shape {tuple(target.shape)} for logits of shape "
                                  f"{tuple(logits.shape)}; give one class index per prediction.")
            target = target.reshape(-1)
        return self.loss_weight * F.cross_entropy(logits.float(), target.long())


register_component(KDSoftCELoss, "loss")
register_component(CrossEntropyLoss, "loss")
