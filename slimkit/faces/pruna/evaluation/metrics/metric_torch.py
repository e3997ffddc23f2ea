"""``TorchMetricWrapper``: Pruna's torchmetrics-backed metrics, computed by torchmetrics itself.

Names (Pruna's): ``accuracy``, ``precision``, ``recall`` (outputs against the labels; the classification task
and ``num_classes`` are read from the first batch's logits unless given), ``perplexity`` (logits against the
next-token labels; ``ignore_index`` defaults to -100, the padding slimkit's text collate writes), ``psnr``
(``data_range=255`` as in Pruna), ``ssim``, ``msssim`` (also spelled ``ms_ssim``). The image metrics are pairwise
by default, as in Pruna: the first model the evaluation agent sees gives the reference outputs, the next ones are
scored against them; ``call_type="single"`` scores the outputs against the batch's ground truth instead.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from slimkit.errors import ConfigError, DataError, MissingPackageError
from slimkit.faces.pruna.evaluation.metrics.metric_base import CALL_TYPES, StatefulMetric, resolve_device
from slimkit.faces.pruna.evaluation.metrics.result import MetricResult

#: name -> (torchmetrics class path, default call type, default constructor arguments)
TORCH_METRICS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "accuracy": ("torchmetrics.classification.Accuracy", "y_gt", {}),
    "precision": ("torchmetrics.classification.Precision", "y_gt", {}),
    "recall": ("torchmetrics.classification.Recall", "y_gt", {}),
    "perplexity": ("torchmetrics.text.Perplexity", "y_gt", {"ignore_index": -100}),
    "psnr": ("torchmetrics.image.PeakSignalNoiseRatio", "pairwise_y_gt", {"data_range": 255.0}),
    "ssim": ("torchmetrics.image.StructuralSimilarityIndexMeasure", "pairwise_y_gt", {}),
    "msssim": ("torchmetrics.image.MultiScaleStructuralSimilarityIndexMeasure", "pairwise_y_gt", {}),
}
ALIASES = {"ms_ssim": "msssim"}
#: Metrics whose network weights Pruna downloads from a hub: name -> (torchmetrics class, call type, the
#: torchmetrics argument that takes a local copy of the weights, what to download).
HUB_METRICS: dict[str, tuple[str, str, str, str]] = {
    "clip_score": ("torchmetrics.multimodal.clip_score.CLIPScore", "y_x", "model_name_or_path",
                   "a CLIP model saved with save_pretrained (e.g. openai/clip-vit-large-patch14)"),
    "fid": ("torchmetrics.image.fid.FrechetInceptionDistance", "gt_y", "feature_extractor_weights_path",
            "torch-fidelity's FID Inception weights file (pt_inception-2015-12-05-6726825d.pth)"),
}
#: Hub metrics slimkit cannot run from local weights yet, and why.
HUB_ONLY = {
    "lpips": "LPIPS loads its backbone through torchvision's downloader",
    "cmmd": "CMMD is not implemented in slimkit yet",
    "dino_score": "the DINO score is not implemented in slimkit yet",
}


def require_local_weights(name: str, model_path: Any) -> str:
    """``model_path`` when ``name`` can run from it; a ConfigError saying what to pass otherwise."""
    if name in HUB_ONLY:
        raise ConfigError(f"{name} needs network weights from a model hub and cannot run offline in slimkit: "
                          f"{HUB_ONLY[name]}. Use psnr, ssim or msssim to compare images.")
    what = HUB_METRICS[name][3]
    if model_path is None:
        raise ConfigError(f"{name} needs model weights that Pruna downloads from a hub; slimkit works offline. "
                          f"Download {what} once and pass its local path: "
                          f"TorchMetricWrapper({name!r}, model_path='/path/to/weights').")
    if not Path(model_path).exists():
        raise ConfigError(f"{name}: model_path {str(model_path)!r} does not exist; pass the local copy of {what}.")
    return str(model_path)
_CLASSIFICATION = ("accuracy", "precision", "recall")
_UNITS = {"psnr": "dB"}


def torchmetrics_class(path: str) -> Callable[..., Any]:
    """The torchmetrics class at ``path``; a MissingPackageError naming the extra when torchmetrics is missing."""
    module_name, _, name = path.rpartition(".")
    try:
        import importlib

        return getattr(importlib.import_module(module_name), name)
    except ImportError as exc:
        raise MissingPackageError(
            f"{name} comes from torchmetrics, which is not installed: pip install 'slimkit[eval]' "
            "(or pip install torchmetrics)."
        ) from exc


def resolve_call_type(metric_name: str, call_type: str, default: str) -> str:
    """Pruna's ``call_type`` (``""``, ``"single"``, ``"pairwise"`` or a pairing such as ``"y_gt"``) made explicit."""
    pairing = default.removeprefix("pairwise_")
    if call_type == "":
        return default
    if call_type == "single":
        return pairing
    if call_type == "pairwise":
        return f"pairwise_{pairing}"
    if call_type in (pairing, f"pairwise_{pairing}"):
        return call_type
    raise ConfigError(f"call_type for {metric_name!r} must be one of {('', *CALL_TYPES)} or {pairing!r}, "
                      f"got {call_type!r}.")


def _embedding(features: Any) -> torch.Tensor:
    """The embedding tensor of ``get_*_features``: Transformers 5 wraps it in an output's ``pooler_output``."""
    return features if isinstance(features, torch.Tensor) else features.pooler_output


class _EmbeddingCLIP(torch.nn.Module):
    """A CLIP model whose ``get_image_features`` / ``get_text_features`` return tensors, as torchmetrics expects."""

    def __init__(self, clip: Any) -> None:
        super().__init__()
        self.clip = clip
        self.config = clip.config

    def get_image_features(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return _embedding(self.clip.get_image_features(*args, **kwargs))

    def get_text_features(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return _embedding(self.clip.get_text_features(*args, **kwargs))


def _clip_loader(path: str) -> Callable[[], tuple[Any, Any]]:
    """Torchmetrics' way to give CLIPScore a model of one's own: a callable returning (model, processor)."""
    def load() -> tuple[Any, Any]:
        from transformers import CLIPModel, CLIPProcessor

        return _EmbeddingCLIP(CLIPModel.from_pretrained(path)), CLIPProcessor.from_pretrained(path)
    return load


def _classification_task(outputs: torch.Tensor) -> dict[str, Any]:
    if outputs.dim() < 2 or outputs.shape[-1] < 2:
        raise DataError(
            f"accuracy/precision/recall read the classes from logits [N, classes], got outputs of shape "
            f"{tuple(outputs.shape)}; pass task= and num_classes= (torchmetrics' arguments) to TorchMetricWrapper."
        )
    return {"task": "multiclass", "num_classes": int(outputs.shape[-1])}


class TorchMetricWrapper(StatefulMetric):
    """A torchmetrics metric under Pruna's name: ``TorchMetricWrapper("accuracy")``, ``("psnr", call_type="single")``.

    Extra keyword arguments go to the torchmetrics constructor (``task="multiclass", num_classes=10``,
    ``average="macro"``, ``data_range=1.0``...).
    """

    def __init__(self, metric_name: str, call_type: str = "", device: str | torch.device | None = None,
                 model_path: str | None = None, **kwargs: Any) -> None:
        name = ALIASES.get(metric_name, metric_name)
        if name in HUB_METRICS or name in HUB_ONLY:
            path, default_call, weights_argument, _ = HUB_METRICS.get(name) or ("", "", "", "")
            local = require_local_weights(name, model_path)
            kwargs[weights_argument] = _clip_loader(local) if name == "clip_score" else local
            defaults: dict[str, Any] = {}
        elif name in TORCH_METRICS:
            path, default_call, defaults = TORCH_METRICS[name]
        else:
            raise ConfigError(f"TorchMetricWrapper has no metric {metric_name!r}; valid: "
                              f"{sorted([*TORCH_METRICS, *ALIASES, *HUB_METRICS, *HUB_ONLY])}.")
        self.metric_name = metric_name
        self.model_path = model_path
        self.call_type = resolve_call_type(metric_name, call_type, default_call)
        self.device = resolve_device(device)
        self.kwargs = {**defaults, **kwargs}
        self._factory = torchmetrics_class(path)
        self.metric: Any = None
        if name not in _CLASSIFICATION or "task" in self.kwargs:
            self.metric = self._build(self.kwargs)
        self.metric_units = _UNITS.get(name)

    def _build(self, kwargs: dict[str, Any]) -> Any:
        try:
            metric = self._factory(**kwargs)
        except ImportError as exc:  # torchmetrics' own optional dependencies (torch-fidelity for FID, ...)
            raise MissingPackageError(f"{self.metric_name} needs a package torchmetrics did not find: {exc}") from exc
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{self.metric_name}: torchmetrics refused the arguments {kwargs}: {exc}") from exc
        self.higher_is_better = metric.higher_is_better
        return metric.to(self.device)

    def _pair(self, x: Any, gt: Any, outputs: torch.Tensor) -> list[Any]:
        reference = {"y": None, "x": x, "gt": gt}
        parts = self.call_type.removeprefix("pairwise_").split("_")
        values = [outputs if part == "y" else reference[part] for part in parts]
        if any(value is None for value in values):
            what = "the first model's outputs" if self.is_pairwise() else "ground truth (the batch's labels)"
            raise DataError(f"{self.metric_name} compares the outputs with {what}, but the batch has none; "
                            "give the datamodule (inputs, target) batches.")
        return [v.to(self.device) if isinstance(v, torch.Tensor) else v for v in values]

    def update(self, x: Any, gt: Any, outputs: torch.Tensor) -> None:
        """Add one batch to the torchmetrics state."""
        if self.metric is None:
            self.metric = self._build({**_classification_task(outputs), **self.kwargs})
        values = self._pair(x, gt, outputs)
        if self.metric_name in ("ssim", "msssim", "ms_ssim"):
            values = [v.float() for v in values]
        try:
            if self.metric_name == "fid":  # torchmetrics' FID takes the two image sets one at a time
                self.metric.update(values[0], real=True)
                self.metric.update(values[1], real=False)
            else:
                self.metric.update(*values)
        except (RuntimeError, ValueError) as exc:
            shapes = " and ".join(str(tuple(v.shape)) for v in values)
            raise DataError(f"{self.metric_name} could not score tensors of shapes {shapes}: {exc}") from exc

    def compute(self) -> MetricResult:
        """The torchmetrics value over the batches added so far (a mean when it is per-sample)."""
        if self.metric is None or not self.metric.update_called:
            raise DataError(f"{self.metric_name} saw no batch: the datamodule's test split is empty.")
        value = self.metric.compute()
        value = float(value.float().mean()) if isinstance(value, torch.Tensor) else float(value)
        return MetricResult(self.metric_name, self.params(), value, self.higher_is_better, self.metric_units)

    def reset(self) -> None:
        """Forget the batches added so far."""
        if self.metric is not None:
            self.metric.reset()

    def move_to_device(self, device: str | torch.device) -> None:
        """Keep the torchmetrics state on ``device``."""
        super().move_to_device(device)
        if self.metric is not None:
            self.metric = self.metric.to(self.device)

    def params(self) -> dict[str, Any]:
        """Name, call type, device and the torchmetrics arguments."""
        local = {"model_path": self.model_path} if self.model_path is not None else {}
        return {**super().params(), **local, **{k: v for k, v in self.kwargs.items() if not callable(v)}}
