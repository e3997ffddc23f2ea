"""MMRazor's way of giving a search its data: a dataloader and an evaluator, calibration samples, an input shape.

:class:`~slimkit.engines.nas.EvolutionSearchLoop` takes either slimkit's ``score_fn(model)`` or MMRazor's
``dataloader`` + ``evaluator`` (``dict(type='Accuracy', topk=(1, 5))`` or any ``evaluator(model, batches) ->
dict``); these helpers turn the latter into the former, pick example inputs for counting FLOPs and build the
batch-norm calibration of ``calibrate_sample_num``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.core.registry import build_component
from slimkit.data.batches import split_batch
from slimkit.engines.nas.constraints import calibrate_bn
from slimkit.errors import ConfigError
from slimkit.evaluation.runtime import batch_size_of, eval_mode

Score = Callable[[nn.Module], float | Mapping[str, float]]


def score_subnet(model: nn.Module, mutator: Any, subnet: Mapping[str, Any], score_fn: Score,
                 calibrate_fn: Callable[[nn.Module], Any] | None, score_key: str) -> dict[str, Any]:
    """``score_fn``'s metrics of ``subnet`` made active (after ``calibrate_fn``), in eval mode without gradients."""
    mutator.set_choices(subnet)
    if calibrate_fn is not None:
        calibrate_fn(model)
    with eval_mode(model), torch.no_grad():
        value = score_fn(model)
    metrics = dict(value) if isinstance(value, Mapping) else {score_key: value}
    if score_key not in metrics:
        raise ConfigError(f"score_fn returned {sorted(metrics)} but score_key is {score_key!r}; pass "
                          f"score_key= one of them.")
    return metrics


def check_batches(dataloader: Any, what: str = "dataloader") -> Iterable[Any]:
    """``dataloader`` if it is batches; ConfigError for MMEngine's dataloader configs (``dict(dataset=...)``)."""
    if isinstance(dataloader, Mapping):
        raise ConfigError(f"{what}={{'dataset': ...}} is an MMEngine dataloader config; slimkit does not build "
                          f"datasets: pass your own batches ({what}=a DataLoader or list of (inputs, labels)).")
    if not isinstance(dataloader, Iterable):
        raise ConfigError(f"{what} must be an iterable of (inputs, labels) batches, got {type(dataloader).__name__}.")
    return dataloader


def _metric_specs(evaluator: Any) -> list[Any]:
    """The metrics of an evaluator as MMEngine writes it (a dict, a name, a list, or an Evaluator's ``metrics``)."""
    if isinstance(evaluator, Mapping) and "metrics" in evaluator:
        if str(evaluator.get("type", "Evaluator")).rpartition(".")[2] != "Evaluator" or len(
                set(evaluator) - {"type", "_scope_", "metrics"}):
            raise ConfigError(f"evaluator={dict(evaluator)!r}: an MMEngine Evaluator dict holds only 'metrics' "
                              "(e.g. dict(type='Evaluator', metrics=[dict(type='Accuracy', topk=(1, 5))])).")
        evaluator = evaluator["metrics"]
    if isinstance(evaluator, Sequence) and not isinstance(evaluator, (str, Mapping)):
        return [m for e in evaluator for m in _metric_specs(e)]
    return [evaluator]


def _build_metric(spec: Any) -> Any:
    if isinstance(spec, str):
        spec = {"type": spec}  # a registered name: its defaults
    if isinstance(spec, type):
        spec = spec()
    built = build_component(spec) if isinstance(spec, Mapping) else spec
    if not callable(built):
        raise ConfigError(f"evaluator must be dict(type='Accuracy', ...), a registered metric name such as "
                          f"'Accuracy', a list of these, or callable(model, batches) -> dict; got "
                          f"{type(built).__name__}.")
    return built


def evaluator_score(dataloader: Any, evaluator: Any) -> Score:
    """``score_fn(model)``: the metrics ``evaluator`` computes on ``dataloader`` (a dict, or a list merged).

    ``evaluator`` as MMEngine writes it: ``dict(type='Accuracy', topk=(1, 5))``, a registered name
    (``'Accuracy'``), a list of these, ``dict(type='Evaluator', metrics=[...])``, or any callable
    ``evaluator(model, batches) -> dict``.
    """
    batches = check_batches(dataloader)
    built = [_build_metric(e) for e in _metric_specs(evaluator)]

    def score(model: nn.Module) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for e in built:
            metrics.update(e(model, batches))
        return metrics

    return score


def example_from(dataloader: Any, estimator_cfg: Mapping[str, Any] | None) -> Any:
    """One example input for counting: zeros of ``estimator_cfg['input_shape']``, else the first sample."""
    shape = (estimator_cfg or {}).get("input_shape")
    if shape is not None:
        return torch.zeros(tuple(int(s) for s in shape))
    if dataloader is None:
        return None
    for batch in check_batches(dataloader):
        inputs, _ = split_batch(batch)
        return inputs[:1] if isinstance(inputs, torch.Tensor) else inputs
    raise ConfigError("The dataloader yielded no batch to take example inputs from.")


def calibration(calibrate_sample_num: int, batches: Any) -> Callable[[nn.Module], Any] | None:
    """A ``calibrate_fn`` that recomputes batch-norm statistics on ``calibrate_sample_num`` samples (-1: none)."""
    if calibrate_sample_num in (-1, 0, None):
        return None
    if isinstance(calibrate_sample_num, bool) or not isinstance(calibrate_sample_num, int) or calibrate_sample_num < 0:
        raise ConfigError(f"calibrate_sample_num must be -1 (no calibration) or a number of samples, got "
                          f"{calibrate_sample_num!r}.")
    data = check_batches(batches, "calibrate_dataloader")
    first = next(iter(data), None)
    if first is None:
        raise ConfigError("calibrate_sample_num > 0 needs batches to calibrate on (calibrate_dataloader=...).")
    per_batch = max(batch_size_of(split_batch(first)[0]), 1)
    count = max(1, math.ceil(calibrate_sample_num / per_batch))
    return lambda model: calibrate_bn(model, data, count)
