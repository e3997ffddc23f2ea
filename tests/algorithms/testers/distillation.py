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


class TestSposSearch(AlgorithmTesterBase):
    algorithm = "spos_search"
    models = ["digits_cnn"]
    reject_models = ["no_weights", "not_a_module"]
    hyperparameters = {"supernet_epochs": 2, "num_candidates": 8, "top_k": 2, "max_epochs": 2, "epochs": 2,
                       "flops_ratio": 0.5, "num_threads": 1}

    @classmethod
    def prepare_config(cls, cfg):
        cfg.add_data("Digits")

    def post_smash_hook(self, smashed, base, inputs):
        from slimkit.evaluation import count_macs
        from slimkit.zoo.digits_cnn import accuracy, digits_split

        state = smashed.applied[0]["state"]
        assert set(state["search_space"]) == {"widths.features_0", "widths.features_4", "widths.features_8",
                                              "widths.classifier_1"}
        assert state["search_space"]["widths.features_8"] == [32, 64, 96, 128]
        # the exported model is the searched subnet: its layer widths are the chosen ones, under the FLOPs limit
        chosen = {name: entry["chosen"] for name, entry in state["subnet"].items()}
        assert smashed.model.features[8].out_channels == chosen["widths.features_8"]
        assert smashed.model.classifier[1].in_features == 4 * chosen["widths.features_8"]
        macs, base_macs = count_macs(smashed.model, inputs[:1]), count_macs(base, inputs[:1])
        assert 2 * macs == state["flops_after"] <= state["flops_limit"] == 0.5 * state["flops_before"]
        assert state["flops_before"] == 2 * base_macs and macs <= 0.5 * base_macs
        assert state["evaluated"] >= 8 and len(state["search_history"]) == 2 and state["supernet_steps"] > 0
        assert {"distill.logits", "student.task"} <= set(state["last_parts"])
        _, _, x_test, y_test = digits_split()
        assert accuracy(smashed.model, x_test, y_test) >= accuracy(base, x_test, y_test) - 0.03
