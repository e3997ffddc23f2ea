"""kd_recover's loss choice names MMRazor's output losses; each trains through slimkit's loop."""

from __future__ import annotations

import pytest
import torch

from slimkit import SmashConfig, smash
from slimkit.errors import ConfigError, DataError
from slimkit.training.distill import DistillObjective, DKDLoss, KLDivergence
from slimkit.zoo import load


@pytest.mark.parametrize("loss", ["KLDivergence", "DKDLoss", "DISTLoss", "WSLD"])
def test_each_loss_trains_the_recovered_model(loss):
    cfg = SmashConfig({"kd_recover": {"loss": loss, "steps": 3, "num_threads": 1, "temperature": 2.0}})
    cfg.add_data("Digits")
    smashed = smash(load("digits_cnn").model, cfg)
    state = smashed.applied[-1]["state"]
    assert state["train_steps"] == 3 and set(state["last_parts"]) == {"distill.logits", "student.task"}


def test_a_loss_not_in_the_list_is_named():
    with pytest.raises(ConfigError, match="kd_recover_loss"):
        SmashConfig({"kd_recover": {"loss": "FancyLoss"}})


def test_the_objective_hands_labels_to_dkd_and_refuses_batches_without_them():
    torch.manual_seed(0)
    student, teacher = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    objective = DistillObjective(teacher, logits_loss=DKDLoss(tau=2))
    expected = DKDLoss(tau=2)(student(x), teacher(x), y)
    assert float(objective.parts(student, (x, y))["distill.logits"].detach()) == pytest.approx(float(expected.detach()))
    with pytest.raises(DataError, match="DKDLoss needs the labels"):
        objective(student, x)
    assert "distill.logits" in DistillObjective(teacher, logits_loss=KLDivergence()).parts(student, x)
