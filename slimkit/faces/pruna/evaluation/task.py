"""Pruna's ``Task``: what to measure (a request) and on which data (a datamodule's test split).

``Task(request=["latency", "accuracy"], datamodule=PrunaDataModule.from_string("Digits"), device="cpu")``; a request
is a list of metric names (see :meth:`~slimkit.faces.pruna.evaluation.metrics.MetricRegistry.names`), a list of
metric objects (``LatencyMetric(n_iterations=20)``, ``TorchMetricWrapper("accuracy")``), or a named request:
``"text_generation_quality"`` (perplexity) or ``"image_generation_quality"`` (CLIP score and CMMD, which need
hub weights).
"""

from __future__ import annotations

from typing import Any

import torch

from slimkit.errors import ConfigError, DataError
from slimkit.faces.pruna.evaluation.metrics.metric_base import (
    BaseMetric,
    StatefulMetric,
    batch_parts,
    resolve_device,
)
from slimkit.faces.pruna.evaluation.metrics.metric_elapsed_time import InferenceTimeStats
from slimkit.faces.pruna.evaluation.metrics.metric_energy import EnvironmentalImpactStats
from slimkit.faces.pruna.evaluation.metrics.metric_model_architecture import ModelArchitectureStats
from slimkit.faces.pruna.evaluation.metrics.metric_torch import TorchMetricWrapper
from slimkit.faces.pruna.evaluation.metrics.registry import Metric, MetricRegistry

NAMED_REQUESTS = ("image_generation_quality", "text_generation_quality")
#: Passing one of these expands to all its metrics (Pruna's parent metrics), with the same arguments.
PARENT_METRICS = (InferenceTimeStats, ModelArchitectureStats, EnvironmentalImpactStats)


def _named_request(request: str, device: str) -> list[Metric]:
    if request == "text_generation_quality":
        return [TorchMetricWrapper("perplexity", device=device)]
    if request == "image_generation_quality":
        return [TorchMetricWrapper("clip_score", device=device)]  # needs local CLIP weights: refuses clearly
    if request.startswith("lm_eval:"):
        raise ConfigError(f"{request!r}: lm-evaluation-harness tasks are not part of slimkit's evaluation; "
                          "request metric names instead, e.g. ['perplexity', 'latency'].")
    if MetricRegistry.has_metric(request):
        return [MetricRegistry.get_metric(request, device=device)]
    raise ConfigError(f"Unknown request {request!r}: pass a list of metric names ({', '.join(MetricRegistry.names())})"
                      f" or a named request ({', '.join(NAMED_REQUESTS)}).")


def _expand(metric: Any) -> list[Metric]:
    if type(metric) in PARENT_METRICS:
        return [child(**metric.params()) for child in type(metric).__subclasses__()]
    if not isinstance(metric, (BaseMetric, StatefulMetric)):
        raise ConfigError(f"A request lists metric names or metric objects, got {type(metric).__name__} {metric!r}.")
    return [metric]


def build_metrics(request: Any, device: str, stateful_device: str) -> list[Metric]:
    """The metric objects a request names (see the module doc)."""
    if isinstance(request, str):
        metrics = _named_request(request, stateful_device)
    elif isinstance(request, (list, tuple)) and request:
        metrics = []
        for item in request:
            if isinstance(item, str):
                metrics.append(MetricRegistry.get_metric(item, device=device))
            else:
                metrics.extend(_expand(item))
    else:
        raise ConfigError(f"request must be a non-empty list of metric names or metric objects, or one of "
                          f"{NAMED_REQUESTS}; got {request!r}.")
    for metric in metrics:
        if isinstance(metric, StatefulMetric):
            metric.move_to_device(stateful_device)
    return metrics


def _check_data(metrics: list[Metric], dataloader: Any) -> None:
    needs_truth = [m.metric_name for m in metrics if isinstance(m, StatefulMetric) and "gt" in m.call_type
                   and not m.is_pairwise()]
    if not needs_truth:
        return
    batch = next(iter(dataloader), None)
    if batch is None:
        raise DataError(f"{', '.join(needs_truth)} need test data, but the datamodule's test split is empty.")
    gt = batch_parts(batch)[1]
    if gt is None:
        raise DataError(f"{', '.join(needs_truth)} compare the model's outputs with ground truth, but the "
                        f"datamodule's test batches carry none; use a datamodule whose batches are (inputs, target).")
    if "perplexity" in needs_truth and (not isinstance(gt, torch.Tensor) or gt.dim() != 2
                                        or gt.is_floating_point()):
        got = f"shape {tuple(gt.shape)}, {gt.dtype}" if isinstance(gt, torch.Tensor) else type(gt).__name__
        raise DataError(f"perplexity needs next-token labels [batch, length] (a text_generation datamodule such as "
                        f"PyDocText), but the test batches' targets are {got}.")


class Task:
    """What to evaluate and on which data (Pruna's ``Task``); see the module doc.

    ``low_memory=True`` keeps the stateful metrics' state on the CPU. The test dataloader is
    ``datamodule.test_dataloader()``; a request whose metrics need what those batches lack is refused here.
    """

    def __init__(self, request: Any, datamodule: Any, device: str | torch.device | None = None,
                 low_memory: bool = False) -> None:
        self.auto_device = device is None
        self.device = resolve_device(device)
        self.low_memory = bool(low_memory)
        self.stateful_metric_device = "cpu" if self.low_memory else self.device
        self.metrics = build_metrics(request, self.device, self.stateful_metric_device)
        if not hasattr(datamodule, "test_dataloader"):
            raise DataError(f"datamodule must be a PrunaDataModule (or slimkit DataModule), got "
                            f"{type(datamodule).__name__}; e.g. PrunaDataModule.from_string('Digits').")
        self.datamodule = datamodule
        self.dataloader = datamodule.test_dataloader()
        _check_data(self.metrics, self.dataloader)

    def get_single_stateful_metrics(self) -> list[StatefulMetric]:
        """Stateful metrics scored on each model alone."""
        return [m for m in self.metrics if isinstance(m, StatefulMetric) and not m.is_pairwise()]

    def get_pairwise_stateful_metrics(self) -> list[StatefulMetric]:
        """Stateful metrics scored against the first evaluated model's outputs."""
        return [m for m in self.metrics if isinstance(m, StatefulMetric) and m.is_pairwise()]

    def get_stateless_metrics(self) -> list[BaseMetric]:
        """Metrics measured on the model itself (time, memory, size, energy, MACs)."""
        return [m for m in self.metrics if isinstance(m, BaseMetric)]

    def is_pairwise_evaluation(self) -> bool:
        """True when some metric compares models with each other."""
        return bool(self.get_pairwise_stateful_metrics())

    def __repr__(self) -> str:
        return f"Task(metrics={[m.metric_name for m in self.metrics]}, device={self.device!r})"
