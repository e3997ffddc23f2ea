"""Pruna's metric classes and ``MetricRegistry`` (``pruna.evaluation.metrics``), over slimkit's measurements."""

from slimkit.faces.pruna.evaluation.metrics.metric_base import BaseMetric, SharedStats, StatefulMetric
from slimkit.faces.pruna.evaluation.metrics.metric_elapsed_time import (
    InferenceTimeStats,
    LatencyMetric,
    ThroughputMetric,
    TotalTimeMetric,
)
from slimkit.faces.pruna.evaluation.metrics.metric_energy import (
    CO2EmissionsMetric,
    EnergyConsumedMetric,
    EnvironmentalImpactStats,
)
from slimkit.faces.pruna.evaluation.metrics.metric_hub import CMMD, DinoScore
from slimkit.faces.pruna.evaluation.metrics.metric_memory import (
    DiskMemoryMetric,
    InferenceMemoryMetric,
    TrainingMemoryMetric,
)
from slimkit.faces.pruna.evaluation.metrics.metric_model_architecture import (
    ModelArchitectureStats,
    TotalMACsMetric,
    TotalParamsMetric,
)
from slimkit.faces.pruna.evaluation.metrics.metric_torch import TorchMetricWrapper
from slimkit.faces.pruna.evaluation.metrics.registry import MetricRegistry
from slimkit.faces.pruna.evaluation.metrics.result import EvaluationResults, MetricResult

__all__ = [
    "BaseMetric",
    "CMMD",
    "CO2EmissionsMetric",
    "DinoScore",
    "DiskMemoryMetric",
    "EnergyConsumedMetric",
    "EnvironmentalImpactStats",
    "EvaluationResults",
    "InferenceMemoryMetric",
    "InferenceTimeStats",
    "LatencyMetric",
    "MetricRegistry",
    "MetricResult",
    "ModelArchitectureStats",
    "SharedStats",
    "StatefulMetric",
    "ThroughputMetric",
    "TorchMetricWrapper",
    "TotalMACsMetric",
    "TotalParamsMetric",
    "TotalTimeMetric",
    "TrainingMemoryMetric",
]
