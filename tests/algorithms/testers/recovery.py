"""Testers of the recoverers: both run after a 70% l1_filter prune of the digits CNN and must win back accuracy."""

from __future__ import annotations

from slimkit.evaluation import count_parameters
from slimkit.zoo.digits_cnn import accuracy, digits_split
from tests.algorithms.testers.base import AlgorithmTesterBase

_PRUNE = {"pruner": "l1_filter", "l1_filter_sparsity": 0.7}


class _RecoveryChecks:
    """Shared checks (a mixin, so the harness does not take it for a tester): the model is still the pruned
    one, the validation loss fell by training, and accuracy is far above the ~10% of the pruned model."""

    models = ["digits_cnn"]
    reject_models = ["not_a_module"]  # the pruner refuses parameter-free models first; see the *Alone testers
    extra_config = _PRUNE

    @classmethod
    def prepare_config(cls, cfg):
        cfg.add_data("Digits")

    def post_smash_hook(self, smashed, base, inputs):
        assert [a["name"] for a in smashed.applied] == ["l1_filter", self.algorithm]
        assert count_parameters(smashed.model) < 0.5 * count_parameters(base)  # recovery kept the pruned shape
        state = smashed.applied[-1]["state"]
        assert state["train_steps"] > 0
        assert state["val_loss_after"] < 0.2 * state["val_loss_before"]
        _, _, x_test, y_test = digits_split()
        assert accuracy(smashed.model, x_test, y_test) >= 0.9  # pruned without recovery: ~0.10
        assert not base.training  # the original model (the teacher) comes back in the mode it had


class TestFinetune(_RecoveryChecks, AlgorithmTesterBase):
    algorithm = "finetune"
    hyperparameters = {"epochs": 1, "num_threads": 1}


class TestKDRecover(_RecoveryChecks, AlgorithmTesterBase):
    algorithm = "kd_recover"
    hyperparameters = {"epochs": 1, "num_threads": 1, "temperature": 2.0}

    def post_smash_hook(self, smashed, base, inputs):
        super().post_smash_hook(smashed, base, inputs)
        assert set(smashed.applied[-1]["state"]["last_parts"]) == {"distill.logits", "student.task"}


class _AloneChecks:
    """The recoverer alone on the dense model (so its own model check refuses a model without weights)."""

    models = ["digits_cnn"]
    reject_models = ["no_weights"]

    @classmethod
    def prepare_config(cls, cfg):
        cfg.add_data("Digits")

    def post_smash_hook(self, smashed, base, inputs):
        assert smashed.applied[0]["state"]["train_steps"] == 5
        _, _, x_test, y_test = digits_split()
        assert accuracy(smashed.model, x_test, y_test) >= accuracy(base, x_test, y_test) - 0.02


class TestFinetuneAlone(_AloneChecks, AlgorithmTesterBase):
    algorithm = "finetune"
    hyperparameters = {"steps": 5, "lr": 1e-4, "num_threads": 1}


class TestKDRecoverAlone(_AloneChecks, AlgorithmTesterBase):
    algorithm = "kd_recover"
    hyperparameters = {"steps": 5, "lr": 1e-4, "num_threads": 1}
