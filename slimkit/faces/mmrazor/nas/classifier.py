"""The classifier around a searchable backbone, as MMRazor's NAS configs build it.

* ``SearchableImageClassifier`` -- backbone, neck, head; ``input_resizer_cfg`` makes the input size a choice
  (:class:`~.elastic_ops.InputResizer`), ``connect_head`` ties the head's input width to the backbone's output
  width (``dict(connect_with_backbone='backbone.last_mutable_channels')``).
* ``DynamicLinearClsHead`` -- a linear head on the last feature, whose input width may follow the backbone's.
* necks ``SqueezeMeanPoolingWithDropout`` (MMRazor's) and ``GlobalAveragePooling`` (MMCls's), and MMCls's
  ``LabelSmoothLoss`` for the head.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from slimkit.engines.nas.dynamic_ops import DynamicLinear
from slimkit.engines.nas.mutables import MutableChannels
from slimkit.errors import ConfigError, check_int, check_number
from slimkit.faces.mmrazor.base import labels_of
from slimkit.faces.mmrazor.builder import build, build_module, register_module
from slimkit.faces.mmrazor.nas.elastic_ops import InputResizer

Feats = torch.Tensor | tuple[torch.Tensor, ...]


def _per_feature(feats: Feats, fn: Any) -> Feats:
    if isinstance(feats, tuple):
        return tuple(fn(f) for f in feats)
    if isinstance(feats, torch.Tensor):
        return fn(feats)
    raise ConfigError(f"A neck takes a tensor or a tuple of tensors, got {type(feats).__name__}.")


@register_module()
class SqueezeMeanPoolingWithDropout(nn.Module):
    """Mean over every dimension after the channels (``[N, C, ...] -> [N, C]``), then dropout in training."""

    def __init__(self, drop_ratio: float = 0.2) -> None:
        super().__init__()
        self.drop_ratio = check_number("SqueezeMeanPoolingWithDropout drop_ratio", drop_ratio, 0, 1, open_high=True)

    def forward(self, feats: Feats) -> Feats:
        """Pooled (and, in training, dropped-out) features."""
        return _per_feature(feats, lambda x: F.dropout(x.flatten(2).mean(2) if x.dim() > 2 else x, self.drop_ratio,
                                                       self.training))


@register_module()
class GlobalAveragePooling(nn.Module):
    """MMCls's neck: ``[N, C, H, W] -> [N, C]`` by the spatial mean (``dim=2`` only)."""

    def __init__(self, dim: int = 2) -> None:
        super().__init__()
        if dim != 2:
            raise ConfigError(f"GlobalAveragePooling supports dim=2 (image features), got {dim!r}.")

    def forward(self, feats: Feats) -> Feats:
        """Spatially averaged features."""
        return _per_feature(feats, lambda x: x.mean((2, 3)) if x.dim() == 4 else x)


@register_module(kind="loss")
class LabelSmoothLoss(nn.Module):
    """MMCls's label-smoothing cross-entropy on class indices: the target is ``(1 - e) onehot + e / classes``.

    ``mode='original'`` uses ``e = label_smooth_val``, ``'classy_vision'`` ``e / (1 + e)``; ``'multi_label'``
    and ``use_sigmoid`` are not supported. ``num_classes`` (when given) is checked against the logits.
    """

    def __init__(self, label_smooth_val: float, num_classes: int | None = None, use_sigmoid: bool | None = None,
                 mode: str = "original", reduction: str = "mean", loss_weight: float = 1.0) -> None:
        super().__init__()
        check_number("LabelSmoothLoss loss_weight", loss_weight)
        if num_classes is not None:
            check_int("LabelSmoothLoss num_classes", num_classes)
        check_number("LabelSmoothLoss label_smooth_val", label_smooth_val, 0, 1, open_high=True)
        if mode not in ("original", "classy_vision") or use_sigmoid:
            raise ConfigError(f"LabelSmoothLoss supports mode='original' or 'classy_vision' without use_sigmoid, got "
                              f"mode={mode!r}, use_sigmoid={use_sigmoid!r}.")
        if reduction not in ("mean", "sum", "none"):
            raise ConfigError(f"LabelSmoothLoss reduction must be 'mean', 'sum' or 'none', got {reduction!r}.")
        eps = float(label_smooth_val)
        self.eps = eps / (1 + eps) if mode == "classy_vision" else eps
        self.num_classes, self.reduction, self.loss_weight = num_classes, reduction, float(loss_weight)

    def forward(self, cls_score: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        """``loss_weight x`` the smoothed cross-entropy."""
        if self.num_classes is not None and cls_score.shape[-1] != self.num_classes:
            raise ConfigError(f"LabelSmoothLoss has num_classes={self.num_classes} but the scores have "
                              f"{cls_score.shape[-1]} classes.")
        loss = F.cross_entropy(cls_score, label.long().reshape(-1), reduction=self.reduction,
                               label_smoothing=self.eps)
        return self.loss_weight * loss


@register_module()
class DynamicLinearClsHead(nn.Module):
    """A linear head on the last feature (``fc``: :class:`~slimkit.engines.nas.DynamicLinear`); ``loss`` its loss.

    :meth:`connect_with_backbone` makes ``fc``'s input width the backbone's output width mutable, so a
    narrower subnet feeds (and exports) a narrower ``fc``. ``topk`` and ``init_cfg`` are read and unused.
    """

    def __init__(self, num_classes: int = 1000, in_channels: int = 624, init_cfg: Any = None,
                 loss: Mapping[str, Any] | nn.Module | None = None, topk: int | Sequence[int] = (1,),
                 cal_acc: bool = False) -> None:
        super().__init__()
        self.num_classes = check_int("DynamicLinearClsHead num_classes", num_classes)
        self.in_channels = check_int("DynamicLinearClsHead in_channels", in_channels)
        self.loss_module = build(loss) if isinstance(loss, Mapping) else loss or nn.CrossEntropyLoss()
        if not callable(self.loss_module):
            raise ConfigError(f"DynamicLinearClsHead loss must be a loss config or module, got {loss!r}.")
        self.fc = self._linear(in_channels)

    def _linear(self, in_channels: int | MutableChannels) -> DynamicLinear:
        fc = DynamicLinear(in_channels, self.num_classes)
        nn.init.normal_(fc.weight, std=0.01)
        nn.init.zeros_(fc.bias)
        return fc

    def connect_with_backbone(self, backbone_output_mutable: MutableChannels) -> None:
        """Make ``fc``'s input width follow ``backbone_output_mutable`` (its widest choice must be ``in_channels``)."""
        if not isinstance(backbone_output_mutable, MutableChannels) or (
                backbone_output_mutable.max_choice != self.in_channels):
            raise ConfigError(f"DynamicLinearClsHead(in_channels={self.in_channels}) cannot connect to "
                              f"{backbone_output_mutable!r}: give a MutableChannels whose widest choice is "
                              f"{self.in_channels}.")
        self.fc = self._linear(backbone_output_mutable)

    def forward(self, feats: Feats) -> torch.Tensor:
        """Class scores from the last feature."""
        x = feats[-1] if isinstance(feats, tuple) else feats
        return self.fc(x.flatten(1))

    def loss(self, feats: Feats, data_samples: Any) -> dict[str, torch.Tensor]:
        """The loss of the scores of ``feats`` against the labels in ``data_samples``: ``{"loss": ...}``."""
        return self.loss_by_scores(self(feats), data_samples)

    def loss_by_scores(self, scores: torch.Tensor, data_samples: Any) -> dict[str, torch.Tensor]:
        """The loss of ``scores`` (already computed) against the labels in ``data_samples``: ``{"loss": ...}``."""
        labels = labels_of(data_samples)
        if not isinstance(labels, torch.Tensor):
            raise ConfigError("DynamicLinearClsHead.loss needs the class indices (data_samples or its 'labels').")
        return {"loss": self.loss_module(scores, labels)}


@register_module()
class SearchableImageClassifier(nn.Module):
    """``head(neck(backbone(resize(preprocess(x)))))`` with MMRazor's ``input_resizer_cfg`` and ``connect_head``.

    ``data_preprocessor``: applied first (a config is built, e.g. ``mmcls.ClsDataPreprocessor``).
    ``input_resizer_cfg=dict(input_sizes=[[h, w], ...])``: the input size becomes a mutable (alias
    ``input_shape``). ``loss(inputs, data_samples)`` is the head's loss; ``forward`` gives the scores.
    """

    def __init__(self, backbone: Mapping[str, Any] | nn.Module, neck: Mapping[str, Any] | nn.Module | None = None,
                 head: Mapping[str, Any] | nn.Module | None = None, pretrained: str | None = None,
                 train_cfg: Mapping[str, Any] | None = None, data_preprocessor: Any = None, init_cfg: Any = None,
                 input_resizer_cfg: Mapping[str, Any] | None = None,
                 connect_head: Mapping[str, str] | None = None) -> None:
        super().__init__()
        if pretrained is not None or train_cfg:
            raise ConfigError("SearchableImageClassifier: pretrained and train_cfg (augments) are not supported; "
                              "load weights with the algorithm's init_cfg.")
        if isinstance(data_preprocessor, Mapping):
            data_preprocessor = build(data_preprocessor)
        if data_preprocessor is not None and not callable(data_preprocessor):
            raise ConfigError(f"SearchableImageClassifier data_preprocessor must be a config or a callable, got "
                              f"{data_preprocessor!r}.")
        if connect_head is not None and not (isinstance(connect_head, Mapping) and all(
                isinstance(v, str) for v in connect_head.values())):
            raise ConfigError(f"connect_head must be dict(<head method>='<component>.<attribute>'), got "
                              f"{connect_head!r}.")
        self.data_preprocessor = data_preprocessor
        if input_resizer_cfg is not None and (not isinstance(input_resizer_cfg, Mapping)
                                              or "input_sizes" not in input_resizer_cfg):
            raise ConfigError(f"input_resizer_cfg must be dict(input_sizes=[[h, w], ...]), got {input_resizer_cfg!r}.")
        self.input_resizer = None if input_resizer_cfg is None else InputResizer(
            input_resizer_cfg["input_sizes"], input_resizer_cfg.get("alias", "input_shape"))
        self.backbone = build_module(backbone, "backbone")
        self.neck = None if neck is None else build_module(neck, "neck")
        self.head = None if head is None else build_module(head, "head")
        for method, source in (connect_head or {}).items():
            component, _, attr = str(source).partition(".")
            target = getattr(getattr(self, component, None), attr, None)
            if self.head is None or not callable(getattr(self.head, method, None)) or target is None:
                raise ConfigError(f"connect_head {method}={source!r}: the head needs a method {method!r} and "
                                  f"{source!r} must name an attribute of this classifier's component.")
            getattr(self.head, method)(target)

    def extract_feat(self, inputs: torch.Tensor) -> Feats:
        """Preprocessed, resized, backbone (and neck) features."""
        if self.data_preprocessor is not None:
            inputs = self.data_preprocessor(inputs)
        if self.input_resizer is not None:
            inputs = self.input_resizer(inputs)
        feats = self.backbone(inputs)
        return feats if self.neck is None else self.neck(feats)

    def forward(self, inputs: torch.Tensor) -> Feats:
        """Class scores (the features when there is no head)."""
        feats = self.extract_feat(inputs)
        return feats if self.head is None else self.head(feats)

    def loss(self, inputs: torch.Tensor, data_samples: Any) -> dict[str, torch.Tensor]:
        """The head's loss on ``inputs`` against ``data_samples`` (the class indices).

        The scores come from this module's own call, so recorders of the whole model (source ``''``) see them.
        """
        if not callable(getattr(self.head, "loss_by_scores", None)):
            raise ConfigError("SearchableImageClassifier.loss needs a head with loss_by_scores (DynamicLinearClsHead).")
        return self.head.loss_by_scores(self(inputs), data_samples)
