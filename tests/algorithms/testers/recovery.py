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


class TestKDRecoverDKD(_RecoveryChecks, AlgorithmTesterBase):
    """kd_recover with MMRazor's decoupled KD loss: the labels of cfg.data reach DKDLoss."""

    algorithm = "kd_recover"
    hyperparameters = {"epochs": 1, "num_threads": 1, "temperature": 2.0, "loss": "DKDLoss"}

    def post_smash_hook(self, smashed, base, inputs):
        super().post_smash_hook(smashed, base, inputs)
        assert smashed.smash_config["kd_recover_loss"] == "DKDLoss"


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


class TestKDRecoverLoRA(AlgorithmTesterBase):
    """kd_recover on a language model with LoRA: adapters on every Linear but the head, merged before saving."""

    algorithm = "kd_recover"
    models = ["tiny_llama"]
    reject_models = ["no_weights"]
    hyperparameters = {"lora_rank": 4, "steps": 2, "batch_size": 4, "lr": 1e-2, "num_threads": 1}

    @classmethod
    def prepare_config(cls, cfg):
        from slimkit import zoo

        cfg.add_tokenizer(zoo.load("tiny_llama").tokenizer)
        cfg.add_data("PyDocText")

    def post_smash_hook(self, smashed, base, inputs):
        import torch

        state = smashed.applied[0]["state"]
        linears = {n: m for n, m in base.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"}
        assert state["lora_rank"] == 4 and state["lora_layers"] == len(linears) and state["train_steps"] == 2
        assert state["trainable_params"] == sum(4 * (m.in_features + m.out_features) for m in linears.values())
        model = smashed.model
        assert type(model) is type(base) and not any("lora" in n for n, _ in model.named_parameters())
        assert set(model.state_dict()) == set(base.state_dict())  # merged: plain weights under the base's names
        after, before = model.state_dict(), base.state_dict()
        assert torch.equal(after["model.embed_tokens.weight"], before["model.embed_tokens.weight"])
        assert not torch.equal(after["model.layers.0.mlp.up_proj.weight"], before["model.layers.0.mlp.up_proj.weight"])
