"""Tester of layer_drop: a two-block tiny Llama keeps one block, distilled from the full model on PyDocText."""

from __future__ import annotations

from slimkit import zoo
from slimkit.evaluation import count_parameters
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
