"""Pruna's ``total_macs`` and ``total_params``, from slimkit's counters.

:func:`~slimkit.evaluation.count_macs` runs one forward of the first test batch;
:func:`~slimkit.evaluation.count_parameters` counts quantized weights logically.
"""

from __future__ import annotations

from typing import Any

import torch

from slimkit.evaluation.counting import count_macs, count_parameters
from slimkit.faces.pruna.evaluation.metrics.metric_base import SharedStats, first_inputs, resolve_device
from slimkit.utils import model_device

TOTAL_MACS, TOTAL_PARAMS = "total_macs", "total_params"


class ModelArchitectureStats(SharedStats):
    """One count shared by :class:`TotalMACsMetric` and :class:`TotalParamsMetric`."""

    def __init__(self, device: str | torch.device | None = None) -> None:
        self.device = resolve_device(device)

    def measure(self, model: Any, dataloader: Any) -> dict[str, float | int]:
        """``{"total_macs": ..., "total_params": ...}``."""
        inputs = first_inputs(dataloader, str(model_device(model)))
        return {TOTAL_MACS: count_macs(model, inputs), TOTAL_PARAMS: count_parameters(model)}


class TotalMACsMetric(ModelArchitectureStats):
    """Multiply-accumulates of one forward of the first test batch (Pruna's ``total_macs``)."""

    metric_name = TOTAL_MACS
    metric_units = "MACs"
    higher_is_better = False


class TotalParamsMetric(ModelArchitectureStats):
    """Number of weights (Pruna's ``total_params``)."""

    metric_name = TOTAL_PARAMS
    metric_units = "params"
    higher_is_better = False
