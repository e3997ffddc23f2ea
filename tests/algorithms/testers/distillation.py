"""Testers of the distillers: layer_drop on a tiny Llama, width_distill on the digits CNN."""

from __future__ import annotations

from slimkit import zoo
from slimkit.evaluation import count_parameters
from slimkit.zoo.digits_cnn import accuracy, digits_split
from tests.algorithms.testers.base import AlgorithmTesterBase


class TestLayerDrop(AlgorithmTesterBase):
    algorithm = "layer_drop"
    models = ["tiny_llama"]
    reject_models = ["digits_cnn", "no_weights", "not_a_module"]
    hyperparameters = {"steps": 2, "batch_size": 4, "num_threads": 1}

    @classmethod
    def prepare_config(cls, cfg):
        cfg.add_tokenizer(zoo.load("tiny_llama").tokenizer)
        cfg.add_data("PyDocText")

    def post_smash_hook(self, smashed, base, inputs):
        model = smashed.model
        assert len(model.model.layers) == 1 and model.config.num_hidden_layers == 1
        assert len(base.model.layers) == 2 and base.config.num_hidden_layers == 2  # the original is untouched
        state = smashed.applied[0]["state"]
        assert state["keep_layers"] == [0] and state["stack"] == "model.layers" and state["train_steps"] == 2
        assert set(state["last_parts"]) == {"distill.hidden0", "distill.logits"}
        per_block = sum(p.numel() for p in base.model.layers[1].parameters())
        assert count_parameters(model) == count_parameters(base) - per_block


class TestWidthDistill(AlgorithmTesterBase):
    algorithm = "width_distill"
    models = ["digits_cnn"]
    reject_models = ["mlp", "no_weights", "not_a_module"]
    hyperparameters = {"width": 0.5, "epochs": 1, "num_threads": 1}

    @classmethod
    def prepare_config(cls, cfg):
        cfg.add_data("Digits")

    def post_smash_hook(self, smashed, base, inputs):
        narrow, wide = smashed.model.features, base.features
        for index in (0, 4, 8):  # each conv keeps half its filters
            assert narrow[index].out_channels == wide[index].out_channels // 2
        assert count_parameters(smashed.model) < 0.3 * count_parameters(base)
        state = smashed.applied[0]["state"]
        assert {"distill.at0", "distill.logits", "student.task"} <= set(state["last_parts"])
        assert state["val_loss_after"] < 0.1 * state["val_loss_before"]
        _, _, x_test, y_test = digits_split()
        assert accuracy(smashed.model, x_test, y_test) >= accuracy(base, x_test, y_test) - 0.03
