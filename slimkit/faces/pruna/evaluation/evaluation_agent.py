"""Pruna's ``EvaluationAgent``: runs a :class:`~slimkit.faces.pruna.evaluation.task.Task` on a model.

``EvaluationAgent(task).evaluate(model)`` returns an
:class:`~slimkit.faces.pruna.evaluation.metrics.EvaluationResults` (a list of ``MetricResult``, as in Pruna, that
prints as a table). Pairwise metrics (PSNR, SSIM, MS-SSIM by default) compare models: the first ``evaluate``
stores its outputs and returns no pairwise result; every later ``evaluate`` is scored against those outputs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from slimkit.errors import ConfigError, DataError
from slimkit.faces.pruna.evaluation.metrics.metric_base import SharedStats, StatefulMetric, batch_parts, run_inference
from slimkit.faces.pruna.evaluation.metrics.result import EvaluationResults, MetricResult
from slimkit.faces.pruna.evaluation.task import Task
from slimkit.utils import model_device


@contextmanager
def _on_device(model: Any, device: str) -> Iterator[None]:
    """Run ``model`` on ``device`` inside the block and move it back to where it was after."""
    if not isinstance(model, nn.Module):
        yield
        return
    before = model_device(model)
    moved = before != torch.device(device)
    if moved:
        model.to(device)
    try:
        yield
    finally:
        if moved:
            model.to(before)


class EvaluationAgent:
    """Evaluates models on one task: ``EvaluationAgent(task)`` or ``EvaluationAgent(request=..., datamodule=...)``."""

    def __init__(self, task: Task | None = None, *, request: Any = None, datamodule: Any = None,
                 device: str | torch.device | None = None) -> None:
        if task is not None:
            if request is not None or datamodule is not None or device is not None:
                raise ConfigError("Pass either task=Task(...) or request= and datamodule= (and device=), not both.")
            if not isinstance(task, Task):
                raise ConfigError(f"task must be a Task, got {type(task).__name__}.")
            self.task = task
        else:
            if request is None or datamodule is None:
                raise ConfigError("Without a task, EvaluationAgent needs both request= and datamodule=.")
            self.task = Task(request=request, datamodule=datamodule, device=device)
        self.device = self.task.device
        self.cache: list[torch.Tensor] = []
        self.evaluation_for_first_model = True
        self.first_model_results: EvaluationResults = EvaluationResults()
        self.subsequent_model_results: EvaluationResults = EvaluationResults()

    def _update(self, model: Any, single: list[StatefulMetric], pairwise: list[StatefulMetric]) -> None:
        caching = self.evaluation_for_first_model and bool(pairwise)
        with torch.inference_mode():
            index = -1
            for index, batch in enumerate(self.task.dataloader):
                x, gt = batch_parts(batch)
                outputs = run_inference(model, x).detach()
                for metric in single:
                    metric.update(x, gt, outputs)
                if caching:
                    self.cache.append(outputs.cpu())
                elif pairwise:
                    if index >= len(self.cache):
                        raise DataError("The test dataloader yields more batches than when the first model was "
                                        "evaluated; pairwise metrics need the same batches for every model.")
                    for metric in pairwise:
                        metric.update(x, self.cache[index].to(outputs.device), outputs)
        if index < 0:
            raise DataError("The datamodule's test dataloader yielded no batch; give it a non-empty test dataset.")

    def _stateless(self, model: Any) -> dict[int, MetricResult]:
        results: dict[int, MetricResult] = {}
        shared: dict[tuple, dict[str, Any]] = {}
        for metric in self.task.get_stateless_metrics():
            if isinstance(metric, SharedStats):
                key = metric.share_key()
                if key not in shared:
                    shared[key] = metric.measure(model, self.task.dataloader)
                results[id(metric)] = metric.from_raw(shared[key])
            else:
                results[id(metric)] = metric.compute(model, self.task.dataloader)
        return results

    def evaluate(self, model: Any, model_name: str | None = None) -> EvaluationResults:
        """Every metric of the task on ``model``, in the order requested (pairwise ones from the second model on)."""
        single = self.task.get_single_stateful_metrics()
        pairwise = self.task.get_pairwise_stateful_metrics()
        results: dict[int, MetricResult] = {}
        with _on_device(model, self.device):
            if single or pairwise:
                self._update(model, single, pairwise)
                scored = single if self.evaluation_for_first_model else single + pairwise
                for metric in scored:
                    results[id(metric)] = metric.compute()
                for metric in single + pairwise:
                    metric.reset()
            results.update(self._stateless(model))
        ordered = EvaluationResults(results[id(m)] for m in self.task.metrics if id(m) in results)
        if self.evaluation_for_first_model:
            self.first_model_results = ordered
            self.evaluation_for_first_model = False
        else:
            self.subsequent_model_results = ordered
        return ordered
