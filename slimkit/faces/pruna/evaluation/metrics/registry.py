"""``MetricRegistry``: Pruna's metric names mapped to the metric classes that compute them."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial
from typing import Any

from slimkit.errors import ConfigError, RegistryError, closest
from slimkit.faces.pruna.evaluation.metrics.metric_base import BaseMetric, StatefulMetric
from slimkit.faces.pruna.evaluation.metrics.metric_elapsed_time import LatencyMetric, ThroughputMetric, TotalTimeMetric
from slimkit.faces.pruna.evaluation.metrics.metric_energy import CO2EmissionsMetric, EnergyConsumedMetric
from slimkit.faces.pruna.evaluation.metrics.metric_hub import CMMD, DinoScore
from slimkit.faces.pruna.evaluation.metrics.metric_memory import (
    DiskMemoryMetric,
    InferenceMemoryMetric,
    TrainingMemoryMetric,
)
from slimkit.faces.pruna.evaluation.metrics.metric_model_architecture import TotalMACsMetric, TotalParamsMetric
from slimkit.faces.pruna.evaluation.metrics.metric_torch import (
    ALIASES,
    HUB_METRICS,
    TORCH_METRICS,
    TorchMetricWrapper,
)

Metric = BaseMetric | StatefulMetric


class MetricRegistry:
    """Metric name -> factory. ``get_metric("latency", n_iterations=20)``; ``register("mine")`` adds a class."""

    _registry: dict[str, Callable[..., Any]] = {}

    @classmethod
    def register(cls, name: str) -> Callable[[type], type]:
        """Class decorator registering a custom metric under ``name`` (a name already taken is an error)."""
        def decorator(metric_cls: type) -> type:
            if name in cls._registry:
                raise RegistryError(f"A metric named {name!r} is already registered; pick another name.")
            cls._registry[name] = metric_cls
            return metric_cls
        return decorator

    @classmethod
    def has_metric(cls, name: str) -> bool:
        """True when ``name`` is a registered metric."""
        return name in cls._registry

    @classmethod
    def names(cls) -> list[str]:
        """Every registered metric name, sorted."""
        return sorted(cls._registry)

    @classmethod
    def get_metric(cls, name: str, **kwargs: Any) -> Metric:
        """A new instance of the metric registered as ``name``; ``kwargs`` go to its constructor.

        ``device`` is passed only to metrics that take one. An unknown name raises a ConfigError listing the
        valid ones.
        """
        if not isinstance(name, str) or name not in cls._registry:
            hint = closest(name, cls._registry) if isinstance(name, str) else ""
            raise ConfigError(f"Unknown metric {name!r}.{hint} Valid metric names: {', '.join(cls.names())}.")
        factory = cls._registry[name]
        target = factory.func if isinstance(factory, partial) else factory
        accepted = inspect.signature(target).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
        if kwargs.get("device") is None or ("device" not in accepted and not takes_any):
            kwargs.pop("device", None)
        return factory(**kwargs)

    @classmethod
    def get_metrics(cls, names: list[str], **kwargs: Any) -> list[Metric]:
        """One instance per name (see :meth:`get_metric`)."""
        return [cls.get_metric(name, **kwargs) for name in names]


for _cls in (LatencyMetric, ThroughputMetric, TotalTimeMetric, DiskMemoryMetric, InferenceMemoryMetric,
             TrainingMemoryMetric, EnergyConsumedMetric, CO2EmissionsMetric, TotalMACsMetric, TotalParamsMetric,
             CMMD, DinoScore):
    MetricRegistry.register(_cls.metric_name)(_cls)
for _name in (*TORCH_METRICS, *ALIASES, *HUB_METRICS, "lpips"):
    MetricRegistry._registry[_name] = partial(TorchMetricWrapper, metric_name=_name)
