"""Pruna's two kinds of metric: measured on the model itself, or accumulated over its outputs.

:class:`BaseMetric` measures the model itself (time, memory, size, energy); :class:`StatefulMetric` accumulates the
model's outputs batch by batch (accuracy, perplexity, PSNR...).

Sibling base metrics that share one measurement (latency, throughput and total time come from one timing run)
derive from one ``*Stats`` class whose :meth:`SharedStats.measure` the evaluation agent runs once per model.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from slimkit.data.batches import LABEL_KEYS, move_batch, split_batch
from slimkit.errors import ConfigError, DataError
from slimkit.faces.pruna.evaluation.metrics.result import MetricResult
from slimkit.utils import Inputs, main_tensor, model_device, run_model

#: Pruna's pairing names: which of (inputs x, ground truth gt, outputs y) a stateful metric compares.
CALL_TYPES = ("single", "pairwise")


def resolve_device(device: str | torch.device | None) -> str:
    """``device`` as a string; None picks CUDA when it is available, else the CPU (Pruna's default)."""
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    text = str(device)
    if text.split(":")[0] not in ("cpu", "cuda"):
        raise ConfigError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}.")
    return text


def batch_parts(batch: Any) -> tuple[Inputs, Any]:
    """``(model inputs, ground truth)`` of one batch (``(x, gt)`` pairs, dicts with ``label(s)``, tensors)."""
    if isinstance(batch, dict) and not any(key in batch for key in LABEL_KEYS):
        return batch, None
    return split_batch(batch, label_keys=LABEL_KEYS)


def first_inputs(dataloader: Any, device: str) -> Inputs:
    """The model inputs of the dataloader's first batch, on ``device``."""
    for batch in dataloader:
        return move_batch(batch_parts(batch)[0], device)
    raise DataError("The datamodule's test dataloader yielded no batch; give it a non-empty test dataset.")


def run_inference(model: Any, inputs: Inputs) -> torch.Tensor:
    """The model's main output tensor on ``inputs`` (logits, images, the first tensor it returns).

    A list of strings (prompts) is one argument, not one argument per prompt.
    """
    if isinstance(inputs, list) and inputs and all(isinstance(item, str) for item in inputs):
        return main_tensor(model(inputs))
    return main_tensor(run_model(model, move_batch(inputs, model_device(model))))


class BaseMetric:
    """A metric measured on the model itself: ``compute(model, dataloader) -> MetricResult``."""

    metric_name: str = ""
    metric_units: str | None = None
    higher_is_better: bool | None = None
    device: str = "cpu"

    def params(self) -> dict[str, Any]:
        """The constructor arguments this metric was built with (Pruna's ``params`` of a result)."""
        names = [p for p in inspect.signature(type(self).__init__).parameters if p not in ("self", "args", "kwargs")]
        return {name: getattr(self, name) for name in names if hasattr(self, name)}

    def result(self, value: float | int, notes: list[str] | None = None) -> MetricResult:
        """A :class:`MetricResult` of this metric holding ``value``."""
        return MetricResult(self.metric_name, self.params(), value, self.higher_is_better, self.metric_units,
                            list(notes or []))

    def compute(self, model: Any, dataloader: Any) -> MetricResult:
        """Measure ``model`` (batches from ``dataloader`` where the metric needs inputs)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"


class SharedStats(BaseMetric):
    """A base metric whose value comes out of one measurement shared with its siblings (see the module doc)."""

    def measure(self, model: Any, dataloader: Any) -> dict[str, float | int]:
        """``{metric name: value}`` for every sibling of this measurement."""
        raise NotImplementedError

    def notes(self, raw: dict[str, float | int]) -> list[str]:
        """Lines to print under the result (settings that qualify the number); none by default."""
        return []

    def share_key(self) -> tuple:
        """Metrics with equal keys are computed by one :meth:`measure` call."""
        owner = next(cls for cls in type(self).__mro__ if "measure" in cls.__dict__)
        return owner, tuple(sorted((k, repr(v)) for k, v in self.params().items()))

    def from_raw(self, raw: dict[str, float | int]) -> MetricResult:
        """The result of this metric out of a shared measurement."""
        return self.result(raw[self.metric_name], self.notes(raw))

    def compute(self, model: Any, dataloader: Any) -> MetricResult:
        """Measure ``model`` alone (the evaluation agent shares one measurement between siblings instead)."""
        return self.from_raw(self.measure(model, dataloader))


class StatefulMetric:
    """A metric that accumulates batches: ``update(x, gt, outputs)``, ``compute() -> MetricResult``, ``reset()``.

    ``call_type`` says what is compared: ``"y_gt"`` the outputs with the ground truth, ``"pairwise_y_gt"`` the
    outputs with the first evaluated model's outputs (the evaluation agent caches them), ``"y"`` the outputs alone.
    """

    metric_name: str = ""
    metric_units: str | None = None
    higher_is_better: bool | None = None
    call_type: str = "y_gt"
    device: str = "cpu"

    def is_pairwise(self) -> bool:
        """True when the metric compares a model's outputs with the first evaluated model's."""
        return self.call_type.startswith("pairwise")

    def update(self, x: Any, gt: Any, outputs: torch.Tensor) -> None:
        """Add one batch: inputs ``x``, ground truth ``gt`` (cached outputs when pairwise), ``outputs``."""
        raise NotImplementedError

    def compute(self) -> MetricResult:
        """The metric over every batch added since the last :meth:`reset`."""
        raise NotImplementedError

    def reset(self) -> None:
        """Forget the batches added so far."""
        raise NotImplementedError

    def move_to_device(self, device: str | torch.device) -> None:
        """Run the metric's state on ``device``."""
        self.device = resolve_device(device)

    def params(self) -> dict[str, Any]:
        """The metric's settings (Pruna's ``params`` of a result)."""
        return {"metric_name": self.metric_name, "call_type": self.call_type, "device": self.device}
