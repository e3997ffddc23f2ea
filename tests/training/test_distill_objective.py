"""DistillObjective trains a student towards a frozen teacher through fit; fit's time budget."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from slimkit.errors import ConfigError
from slimkit.training import fit
from slimkit.training.distill import ConfigurableDistiller, DistillObjective, KLDivergence, frozen_teacher
from tests.training.conftest import make_mlp


def _agreement(a: nn.Module, b: nn.Module, x: torch.Tensor) -> float:
    with torch.no_grad():
        return float((a(x).argmax(1) == b(x).argmax(1)).float().mean())


def test_a_student_learns_the_teachers_outputs_and_the_teacher_stays_frozen(digits, digit_loader):
    x, y, x_test, _ = digits
    teacher = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10))
    fit(teacher, digit_loader, epochs=5, lr=1e-2, seed=0, progress=False)
    teacher.train()  # handed in training mode: frozen_teacher must switch it to eval and back
    before = copy.deepcopy(teacher.state_dict())
    student = make_mlp(seed=1)
    start = _agreement(student, teacher.eval(), x_test)
    teacher.train()
    distiller = ConfigurableDistiller(
        student_recorders=dict(h=dict(type="ModuleOutputs", source="2")),
        teacher_recorders=dict(h=dict(type="ModuleOutputs", source="3")),
        distill_losses=dict(hidden=dict(type="MSELoss", loss_weight=0.1)),
        loss_forward_mappings=dict(hidden=dict(s_feature=dict(from_student=True, recorder="h"),
                                               t_feature=dict(from_student=False, recorder="h"))))
    distiller.prepare(student, teacher)
    objective = DistillObjective(teacher, distiller, KLDivergence(tau=4.0), task_weight=0.0)
    with frozen_teacher(teacher):
        assert not teacher.training
        result = fit(student, digit_loader, loss=objective, epochs=5, lr=1e-2, seed=0, progress=False)
    assert teacher.training  # mode restored
    for key, value in teacher.state_dict().items():  # BatchNorm statistics and weights untouched
        torch.testing.assert_close(value, before[key], msg=key)
    assert set(objective.last) == {"distill.hidden", "distill.logits"}
    assert sum(result.losses[-5:]) < 0.6 * sum(result.losses[:5])
    assert _agreement(student, teacher.eval(), x_test) > max(0.9, start + 0.5)


def test_objective_needs_something_to_train_on():
    with pytest.raises(ConfigError, match="needs a distiller, a logits_loss or a task_weight"):
        DistillObjective(make_mlp())


def test_fit_stops_at_the_time_budget(digit_loader):
    result = fit(make_mlp(), digit_loader, epochs=1000, max_seconds=0.05, progress=False)
    assert result.stopped_early and 1 <= result.steps < 1000 * len(digit_loader)
    with pytest.raises(ConfigError, match="max_seconds must be a number > 0"):
        fit(make_mlp(), digit_loader, max_seconds=0)
