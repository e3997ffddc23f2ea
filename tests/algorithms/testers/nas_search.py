"""Testers of the smash NAS algorithms on the digits CNN: autoslim, bignas, darts, dsnas (slow: supernet training)."""

from __future__ import annotations

from slimkit.evaluation import count_macs, count_parameters
from tests.algorithms.testers.base import AlgorithmTesterBase

WIDTH_GROUPS = {"widths.features_0", "widths.features_4", "widths.features_8", "widths.classifier_1"}


class DigitsSupernet:
    """What every NAS tester shares: the digits CNN and data, slow (each trains a supernet)."""

    models = ["digits_cnn"]
    marks = ["slow"]

    @classmethod
    def prepare_config(cls, cfg):
        cfg.add_data("Digits")


def _check_width_subnet(smashed, base, inputs):
    """The exported model has the chosen widths, is under the FLOPs budget and computes the supernet's path."""
    state = smashed.applied[0]["state"]
    assert set(state["search_space"]) == WIDTH_GROUPS
    assert state["search_space"]["widths.features_8"] == [32, 64, 96, 128]
    chosen = {name: entry["chosen"] for name, entry in state["subnet"].items()}
    assert smashed.model.features[8].out_channels == chosen["widths.features_8"]
    assert smashed.model.features[4].out_channels == chosen["widths.features_4"]
    assert smashed.model.classifier[1].in_features == 4 * chosen["widths.features_8"]
    macs, base_macs = count_macs(smashed.model, inputs[:1]), count_macs(base, inputs[:1])
    assert 2 * macs == state["flops_after"] <= state["flops_limit"] == 0.5 * state["flops_before"] == base_macs
    assert count_parameters(smashed.model) < count_parameters(base)
    assert state["export_max_abs_diff"] <= 1e-5 and state["supernet_steps"] == 6
    return state


def _check_conv_choices(smashed, base, inputs, steps):
    """Every conv left its full kxk candidate for the argmax one; smaller, and the supernet's path exactly."""
    state = smashed.applied[0]["state"]
    assert set(state["choices"]) == {"features.0", "features.4", "features.8"}
    assert state["candidates"]["features.4"] == ["conv", "point", "sep"]  # 32 -> 64 channels: no skip
    assert all(choice != "conv" for choice in state["choices"].values())
    for name, choice in state["choices"].items():
        layer = smashed.model.get_submodule(name)
        probs = state["probabilities"][name]
        assert probs.index(max(probs)) == state["candidates"][name].index(choice)
        if choice == "point":
            assert layer.kernel_size == (1, 1)
    macs, base_macs = count_macs(smashed.model, inputs[:1]), count_macs(base, inputs[:1])
    assert macs == state["macs_after"] < 0.5 * base_macs and state["macs_before"] == base_macs
    assert count_parameters(smashed.model) < count_parameters(base)
    assert state["export_max_abs_diff"] <= 1e-5 and state["supernet_steps"] == steps
    return state


class TestAutoslim(DigitsSupernet, AlgorithmTesterBase):
    algorithm = "autoslim"
    reject_models = ["no_weights", "not_a_module"]
    hyperparameters = {"supernet_steps": 6, "flops_ratio": 0.5, "score_batches": 1, "calibrate_batches": 0,
                       "num_threads": 1}

    def post_smash_hook(self, smashed, base, inputs):
        state = _check_width_subnet(smashed, base, inputs)
        steps = state["greedy_steps"]  # each greedy step narrows one group by one choice and lowers the FLOPs
        assert steps and all(a["flops"] > b["flops"] for a, b in zip(steps, steps[1:], strict=False))
        assert steps[-1]["flops"] == state["flops_after"] and steps[-2]["flops"] > state["flops_limit"]


class TestBignas(DigitsSupernet, AlgorithmTesterBase):
    algorithm = "bignas"
    reject_models = ["no_weights", "not_a_module"]
    hyperparameters = {"supernet_steps": 6, "flops_ratio": 0.5, "num_candidates": 6, "top_k": 2, "max_epochs": 2,
                       "score_batches": 1, "calibrate_batches": 0, "num_threads": 1}

    def post_smash_hook(self, smashed, base, inputs):
        state = _check_width_subnet(smashed, base, inputs)
        assert state["evaluated"] >= 6 and len(state["search_history"]) == 2


class TestDarts(DigitsSupernet, AlgorithmTesterBase):
    algorithm = "darts"
    reject_models = ["mlp", "no_weights", "not_a_module"]
    # a strong FLOPs penalty and a fast alpha: every conv must leave its full kxk candidate
    hyperparameters = {"steps": 12, "flops_weight": 50.0, "arch_lr": 0.1, "num_threads": 1}

    def post_smash_hook(self, smashed, base, inputs):
        _check_conv_choices(smashed, base, inputs, steps=12)


class TestDsnas(DigitsSupernet, AlgorithmTesterBase):
    algorithm = "dsnas"
    reject_models = ["mlp", "no_weights", "not_a_module"]
    hyperparameters = {"steps": 12, "pretrain_steps": 2, "flops_weight": 50.0, "arch_lr": 0.1, "num_threads": 1}

    def post_smash_hook(self, smashed, base, inputs):
        state = _check_conv_choices(smashed, base, inputs, steps=12)
        assert state["arch_steps"] == 10  # after the 2 uniform steps: one per later backward
