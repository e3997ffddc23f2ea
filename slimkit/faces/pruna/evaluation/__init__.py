"""Pruna's evaluation (``pruna.evaluation``): ``Task``, ``EvaluationAgent`` and the metrics they run.

``from slimkit.faces.pruna.evaluation.task import Task`` and
``from slimkit.faces.pruna.evaluation.evaluation_agent import EvaluationAgent`` are Pruna's import lines with
``pruna`` replaced by ``slimkit.faces.pruna``; both names are also in ``slimkit.faces.pruna``.
"""

from slimkit.faces.pruna.evaluation.evaluation_agent import EvaluationAgent
from slimkit.faces.pruna.evaluation.metrics import EvaluationResults, MetricRegistry, MetricResult
from slimkit.faces.pruna.evaluation.task import Task

__all__ = ["EvaluationAgent", "EvaluationResults", "MetricRegistry", "MetricResult", "Task"]
