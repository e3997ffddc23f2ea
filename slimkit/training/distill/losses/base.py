"""The base of the distillation losses: ``loss_weight``, MMRazor's reductions, and argument checks.

Every loss is an ``nn.Module`` whose ``forward`` argument names are what a distiller's ``loss_forward_mappings``
fill (MMRazor's names: ``preds_S``/``preds_T`` for predictions, ``s_feature``/``t_feature`` for features).
``same_shape`` says whether the two inputs must have equal shapes (else a connector is needed). All maths runs
in float32. ``loss_weight`` may be negative: a data-free generator *maximises* what its student minimises.

Feature losses do not detach the teacher's side, as in MMRazor: the teacher runs without gradients, and a
learnable teacher-side connector (factor transfer's paraphraser, FBKD's teacher non-local block, CRD's teacher
embedding) trains through the loss. Logit losses detach the teacher unless ``teacher_detach=False``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from slimkit.errors import ConfigError, check_number
from slimkit.training.losses import IGNORE_INDEX

#: the reductions MMRazor's losses take (``"none"`` leaves a tensor; the distiller averages it, as MMEngine does)
REDUCTIONS: tuple[str, ...] = ("none", "batchmean", "sum", "mean")


def positive(owner: str, value: Any, what: str) -> float:
    """``value`` as a float > 0, else ConfigError naming ``owner`` and ``what``."""
    return check_number(f"{owner}: {what}", value, 0, open_low=True)


def finite(owner: str, value: Any, what: str) -> float:
    """``value`` as a finite float, else ConfigError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{owner}: {what} must be a finite number, got {value!r}.")
    return float(value)


def reduction_of(owner: str, value: Any) -> str:
    """``value`` if it is one of :data:`REDUCTIONS`, else ConfigError listing them."""
    if value not in REDUCTIONS:
        raise ConfigError(f"{owner}: reduction must be one of {', '.join(map(repr, REDUCTIONS))}, got {value!r}.")
    return str(value)


def reduce(values: torch.Tensor, reduction: str, rows: int) -> torch.Tensor:
    """Reduce element-wise loss ``values``: ``batchmean`` = sum / ``rows``, ``mean`` = average, ``sum``, ``none``."""
    if reduction == "none":
        return values
    if reduction == "sum":
        return values.sum()
    if reduction == "mean":
        return values.mean()
    return values.sum() / max(rows, 1)


def class_dim(logits: torch.Tensor) -> int:
    """Where the classes are: last in ``[N, C]`` and token logits ``[N, L, C]``, else 1 (``[N, C, H, W]``)."""
    return -1 if logits.dim() <= 3 else 1


def check_pair(owner: str, a: torch.Tensor, b: torch.Tensor, what: str = "shape") -> None:
    """ConfigError unless student tensor ``a`` and teacher tensor ``b`` have the same shape."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        raise ConfigError(f"{owner} compares two tensors, got {type(a).__name__} and {type(b).__name__}.")
    if a.shape != b.shape:
        raise ConfigError(f"{owner} needs student and teacher inputs of the same {what}: {tuple(a.shape)} vs "
                          f"{tuple(b.shape)}. Add a connector on the student side of the mapping.")


def labels_for(owner: str, labels: Any, rows: int) -> torch.Tensor:
    """Integer class labels, one per prediction row (soft / one-hot ``[N, C]`` labels become their argmax)."""
    if not isinstance(labels, torch.Tensor):
        raise ConfigError(f"{owner} needs gt_labels as a tensor of class indices, got {type(labels).__name__}; map "
                          "it from the data samples (dict(from_student=True, recorder=<a ModuleInputs recorder on "
                          "'head.loss_module'>, data_idx=1)).")
    if labels.is_floating_point() and labels.dim() >= 2:
        labels = labels.argmax(dim=-1)
    labels = labels.reshape(-1).long()
    if labels.numel() != rows:
        raise ConfigError(f"{owner}: {labels.numel()} labels for {rows} predictions; give one class index per row.")
    return labels


def labelled_rows(owner: str, preds_S: torch.Tensor, preds_T: torch.Tensor,  # noqa: N803 (MMRazor names)
                  gt_labels: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Student and (detached) teacher logits as float rows ``[M, C]`` and their labels; rows labelled -100 dropped."""
    dim = class_dim(preds_S)
    s = preds_S.float().movedim(dim, -1).flatten(0, -2)
    t = preds_T.detach().float().movedim(dim, -1).flatten(0, -2)
    labels = labels_for(owner, gt_labels, s.shape[0])
    keep = labels != IGNORE_INDEX
    return s[keep], t[keep], labels[keep]


class DistillLoss(nn.Module):
    """Base of the distillation losses: holds ``loss_weight``; subclasses implement ``forward``."""

    #: whether the student and teacher tensors must have the same shape (no connector -> a clear error)
    same_shape: ClassVar[bool] = True

    def __init__(self, loss_weight: float = 1.0) -> None:
        super().__init__()
        self.loss_weight = finite(type(self).__name__, loss_weight, "loss_weight")
