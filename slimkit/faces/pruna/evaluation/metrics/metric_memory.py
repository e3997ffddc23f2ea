"""Pruna's ``disk_memory``, ``inference_memory`` and ``training_memory``, in MB (2**20 bytes), on the CPU and CUDA.

``disk_memory``: slimkit's :func:`~slimkit.evaluation.size_on_disk` (the model really written, no pickle).
``inference_memory``: :func:`~slimkit.evaluation.peak_memory` on the first test batch (weights + inputs + the
forward's measured peak). ``training_memory``: :func:`~slimkit.evaluation.training_memory.training_peak_memory`
(forward and backward in train mode). Pruna reads these from the GPU driver and only on CUDA; slimkit measures
the allocations themselves, so they work on the CPU too.
"""

from __future__ import annotations

from typing import Any

from slimkit.evaluation.runtime import peak_memory
from slimkit.evaluation.size import size_on_disk
from slimkit.evaluation.training_memory import training_peak_memory
from slimkit.faces.pruna.evaluation.metrics.metric_base import BaseMetric, first_inputs
from slimkit.faces.pruna.evaluation.metrics.result import MetricResult
from slimkit.utils import model_device

MB = 2**20
DISK_MEMORY, INFERENCE_MEMORY, TRAINING_MEMORY = "disk_memory", "inference_memory", "training_memory"


class _MemoryMetric(BaseMetric):
    metric_units = "MB"
    higher_is_better = False

    def __init__(self, gpu_indices: list[int] | None = None) -> None:
        self.gpu_indices = gpu_indices  # Pruna's argument; slimkit measures on the model's own device

    def measure_bytes(self, model: Any, dataloader: Any) -> int:
        raise NotImplementedError

    def compute(self, model: Any, dataloader: Any) -> MetricResult:
        """The memory in MB."""
        return self.result(self.measure_bytes(model, dataloader) / MB)


class DiskMemoryMetric(_MemoryMetric):
    """Size of the saved model (Pruna's ``disk_memory``)."""

    metric_name = DISK_MEMORY

    def measure_bytes(self, model: Any, dataloader: Any) -> int:
        """Bytes the model takes on disk."""
        return size_on_disk(model)


class InferenceMemoryMetric(_MemoryMetric):
    """Peak memory of one inference forward on the first test batch (Pruna's ``inference_memory``)."""

    metric_name = INFERENCE_MEMORY

    def measure_bytes(self, model: Any, dataloader: Any) -> int:
        """Peak bytes of one forward."""
        return peak_memory(model, first_inputs(dataloader, str(model_device(model))))


class TrainingMemoryMetric(_MemoryMetric):
    """Peak memory of one forward and backward on the first test batch (Pruna's ``training_memory``)."""

    metric_name = TRAINING_MEMORY

    def measure_bytes(self, model: Any, dataloader: Any) -> int:
        """Peak bytes of one training step."""
        return training_peak_memory(model, first_inputs(dataloader, str(model_device(model))))
