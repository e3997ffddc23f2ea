"""Testers of the channel-unit pruners from MMRazor (issue 36): group_fisher, ite_prune, dcff, dmcp,
slimmable_network, on the digits CNN with the Digits data and small budgets.

Each hook proves the algorithm acted: the layers are physically narrower in the way the algorithm promises (the
MACs target, the kept ratio, the deployed width), the model has fewer parameters, and it still classifies the
digits test split (the unpruned model scores ~0.99).
"""

from __future__ import annotations

from slimkit.evaluation import count_macs, count_parameters
from tests.algorithms.testers.base import AlgorithmTesterBase
from tests.algorithms.testers.search_pruners import _Digits, _state, digits_accuracy

#: the digits CNN's coupled groups: each conv/hidden Linear is one unit (the output Linear stays)
UNITS = {"features.0": 32, "features.4": 64, "features.8": 128, "classifier.1": 128}


def widths(smashed) -> dict[str, int]:
    return {name: smashed.model.get_submodule(name).weight.shape[0] for name in UNITS}


class TestGroupFisher(_Digits, AlgorithmTesterBase):
    algorithm = "group_fisher"
    marks = ["slow"]  # ~2 s: a channel per step until the target
    hyperparameters = {"interval": 1, "target_macs_ratio": 0.9, "steps": 400, "finetune_steps": 5, "batch_size": 32}

    def post_smash_hook(self, smashed, base, inputs):
        state = _state(smashed)
        assert state["reached_target"] and state["macs_ratio"] <= 0.9
        assert state["pruned"] == state["prune_steps"]  # one channel per step (interval 1)
        assert sum(UNITS.values()) - sum(widths(smashed).values()) == state["pruned"]
        assert count_macs(smashed.model, inputs) <= 0.92 * count_macs(base, inputs)
        assert count_parameters(smashed.model) < count_parameters(base)
        assert digits_accuracy(smashed) > 0.8


class TestItePrune(_Digits, AlgorithmTesterBase):
    algorithm = "ite_prune"
    hyperparameters = {"ratio": 0.5, "prune_times": 2, "step_freq": 3, "steps": 6, "batch_size": 32}

    def post_smash_hook(self, smashed, base, inputs):
        assert widths(smashed) == {name: n // 2 for name, n in UNITS.items()}
        assert _state(smashed)["train_steps"] == 6
        assert count_parameters(smashed.model) < 0.3 * count_parameters(base)


class TestDCFF(_Digits, AlgorithmTesterBase):
    algorithm = "dcff"
    marks = ["slow"]  # 2-6 s on 2 shared cores
    hyperparameters = {"ratio": 0.75, "steps": 6, "batch_size": 32}

    def post_smash_hook(self, smashed, base, inputs):
        assert widths(smashed) == {name: n * 3 // 4 for name, n in UNITS.items()}
        assert count_parameters(smashed.model) < 0.6 * count_parameters(base)
        assert digits_accuracy(smashed) > 0.6


class TestDMCP(_Digits, AlgorithmTesterBase):
    algorithm = "dmcp"
    hyperparameters = {"target_macs_ratio": 0.5, "steps": 4, "arch_start_ratio": 0.5, "rate_offset": 0.25,
                       "min_rate": 0.25, "batch_size": 32}

    def post_smash_hook(self, smashed, base, inputs):
        state = _state(smashed)
        for name, n in UNITS.items():  # min_ch + k blocks of a quarter: a multiple of n/4, at least a quarter
            kept = smashed.model.get_submodule(name).weight.shape[0]
            assert n // 4 <= kept <= n
        assert "dmcp_search" not in dict(smashed.model.named_children())
        assert set(state["units"]) == {f"{n}_(0, {c})_{c}" for n, c in UNITS.items()}
        assert count_parameters(smashed.model) <= count_parameters(base)


class TestSlimmableNetwork(_Digits, AlgorithmTesterBase):
    algorithm = "slimmable_network"
    marks = ["slow"]  # the half width needs ~20 steps for its own batch-norm statistics
    hyperparameters = {"widths": ["1.0", "0.5"], "deploy_width": 0.5, "steps": 20}

    def post_smash_hook(self, smashed, base, inputs):
        assert widths(smashed) == {name: n // 2 for name, n in UNITS.items()}
        assert count_parameters(smashed.model) < 0.3 * count_parameters(base)
        assert digits_accuracy(smashed) > 0.5
