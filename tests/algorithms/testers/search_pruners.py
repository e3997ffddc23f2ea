"""Testers of the pruners that train or search (issue 24): admm, lottery_ticket, movement, sensitivity, net_adapt,
simulated_annealing, auto_compress, amc. All run on the digits CNN with the Digits data, with small budgets.

Each hook proves the algorithm acted: the sparsity it promises is in the (shrunk) model, the speedup made the
model smaller, and test accuracy (the fixed digits split, 450 images; the unpruned model scores ~0.99) stays
above a stated bound. The harness then saves, reloads and compares outputs.
"""

from __future__ import annotations

import torch

from slimkit.evaluation import count_macs, count_parameters
from slimkit.utils import run_model
from slimkit.zoo.digits_cnn import accuracy, digits_split
from tests.algorithms.testers.base import AlgorithmTesterBase
from tests.algorithms.testers.pruners import REJECT, check_digits_half

#: output channels of the digits CNN's selectable layers (classifier.3 feeds the output and stays dense)
CHANNELS = {"features.0": 32, "features.4": 64, "features.8": 128, "classifier.1": 128}
WEIGHTS = {"features.0": 32 * 9, "features.4": 64 * 32 * 9, "features.8": 128 * 64 * 9, "classifier.1": 128 * 512}


def _state(smashed) -> dict:
    return smashed.applied[0]["state"]


def digits_accuracy(smashed) -> float:
    _, _, x_test, y_test = digits_split()
    return accuracy(smashed.model, x_test, y_test)


def check_allocation(smashed, base, inputs, target: float) -> dict[str, float]:
    """The recorded allocation reaches ``target`` of the selected weights, and the shrunk layers match it."""
    allocation = _state(smashed)["allocation"]
    assert set(allocation) == set(CHANNELS)
    overall = sum(WEIGHTS[n] * s for n, s in allocation.items()) / sum(WEIGHTS.values())
    assert target <= overall <= target + 0.03, overall
    for name, sparsity in allocation.items():
        kept = smashed.model.get_submodule(name).weight.shape[0]
        assert kept == CHANNELS[name] - round(sparsity * CHANNELS[name]), (name, kept, sparsity)
    assert count_parameters(smashed.model) < count_parameters(base)
    assert count_macs(smashed.model, inputs) < count_macs(base, inputs)
    return allocation


class _Digits:
    """Mixin: the digits CNN, smashed with the Digits data (validation split scores the search candidates)."""

    models = ["digits_cnn"]
    reject_models = REJECT

    @classmethod
    def prepare_config(cls, cfg):
        cfg.add_data("Digits")


class TestADMM(_Digits, AlgorithmTesterBase):
    algorithm = "admm"
    hyperparameters = {"sparsity": 0.5, "num_iterations": 3, "row": 0.1, "lr": 1e-2}

    def post_smash_hook(self, smashed, base, inputs):
        check_digits_half(smashed, base, inputs)
        assert len(_state(smashed)["residuals"]) == 3
        assert digits_accuracy(smashed) > 0.7  # hard pruning at 50% without ADMM leaves ~0.10 on this model


class TestLotteryTicket(_Digits, AlgorithmTesterBase):
    algorithm = "lottery_ticket"
    hyperparameters = {"sparsity": 0.5, "prune_iterations": 2, "epochs": 1}

    def post_smash_hook(self, smashed, base, inputs):
        check_digits_half(smashed, base, inputs)
        assert len(_state(smashed)["round_final_losses"]) == 3  # dense round + 2 pruning rounds
        assert digits_accuracy(smashed) > 0.8


class TestLotteryTicketLevel(_Digits, AlgorithmTesterBase):
    """The paper's unstructured tickets: shapes stay, the weights hold the zeros."""

    algorithm = "lottery_ticket"
    hyperparameters = {"sparsity": 0.75, "prune_iterations": 2, "epochs": 1, "base_algo": "level"}

    def post_smash_hook(self, smashed, base, inputs):
        assert count_parameters(smashed.model) == count_parameters(base)
        for name in CHANNELS:
            weight = smashed.model.get_submodule(name).weight
            assert abs(float((weight == 0).float().mean()) - 0.75) < 0.01, name
        assert digits_accuracy(smashed) > 0.9


class TestMovement(_Digits, AlgorithmTesterBase):
    algorithm = "movement"
    hyperparameters = {"sparsity": 0.5, "epochs": 2}

    def post_smash_hook(self, smashed, base, inputs):
        check_digits_half(smashed, base, inputs)
        assert _state(smashed)["train_steps"] > 0
        assert digits_accuracy(smashed) > 0.85


class TestMovementFine(_Digits, AlgorithmTesterBase):
    algorithm = "movement"
    hyperparameters = {"sparsity": 0.6, "epochs": 2, "granularity": "fine"}

    def post_smash_hook(self, smashed, base, inputs):
        assert count_parameters(smashed.model) == count_parameters(base)
        for name in CHANNELS:
            weight = smashed.model.get_submodule(name).weight
            assert abs(float((weight == 0).float().mean()) - 0.6) < 0.01, name
        assert digits_accuracy(smashed) > 0.9


class TestSensitivity(_Digits, AlgorithmTesterBase):
    algorithm = "sensitivity"
    hyperparameters = {"sparsity": 0.5, "sparsity_per_iter": 0.25, "finetune_steps": 10}

    def post_smash_hook(self, smashed, base, inputs):
        check_allocation(smashed, base, inputs, 0.5)
        steps = _state(smashed)["steps"]
        assert len(steps) == 2 and steps[0]["sparsity"] < steps[1]["sparsity"]
        assert digits_accuracy(smashed) > 0.9


class TestNetAdapt(_Digits, AlgorithmTesterBase):
    algorithm = "net_adapt"
    hyperparameters = {"sparsity": 0.5, "sparsity_per_iteration": 0.25, "finetune_steps": 5}

    def post_smash_hook(self, smashed, base, inputs):
        allocation = check_allocation(smashed, base, inputs, 0.5)
        proposals = _state(smashed)["proposals"]
        assert {p["iteration"] for p in proposals} == {1, 2}
        for proposal in proposals:  # each proposal names the one layer it raised
            assert proposal["layer"] in CHANNELS
        assert sum(s > 0 for s in allocation.values()) >= 1
        assert digits_accuracy(smashed) > 0.9


class TestSimulatedAnnealing(_Digits, AlgorithmTesterBase):
    algorithm = "simulated_annealing"
    hyperparameters = {"sparsity": 0.3, "cool_down_rate": 0.6, "eval_finetune_steps": 20}

    def post_smash_hook(self, smashed, base, inputs):
        check_allocation(smashed, base, inputs, 0.3)
        candidates = _state(smashed)["candidates"]
        assert len(candidates) == 5  # T = 100, 60, 36, 21.6 and the start
        chosen = max(candidates, key=lambda c: c["metric"])
        assert all(abs(s - 0.3) < 0.05 for s in candidates[0]["allocation"].values())  # the uniform start
        assert chosen["metric"] >= candidates[0]["metric"]  # never worse than the uniform start
        assert _state(smashed)["finetune_steps"] == 20  # returned as scored: after 20 fine-tuning steps
        assert digits_accuracy(smashed) > 0.9


class TestAutoCompress(_Digits, AlgorithmTesterBase):
    algorithm = "auto_compress"
    hyperparameters = {"sparsity": 0.5, "num_iterations": 2, "cool_down_rate": 0.5, "admm_num_iterations": 2,
                       "eval_finetune_steps": 5}

    def post_smash_hook(self, smashed, base, inputs):
        check_allocation(smashed, base, inputs, 0.5)
        assert [len(r) for r in _state(smashed)["residuals"]] == [2, 2]
        assert digits_accuracy(smashed) > 0.7  # as pruned (~0.8-0.87 here); one-shot l1_filter at 0.5 leaves 0.10


class TestAMC(_Digits, AlgorithmTesterBase):
    algorithm = "amc"
    hyperparameters = {"flops_ratio": 0.5, "episodes": 30, "warmup": 10, "eval_finetune_steps": 5}

    def post_smash_hook(self, smashed, base, inputs):
        ratio = count_macs(smashed.model, inputs) / count_macs(base, inputs)
        assert ratio <= 0.5 + 1e-3, ratio  # the budget holds after the real speedup
        assert abs(ratio - _state(smashed)["macs_ratio"]) < 0.01  # and the agent's MAC count is the real one
        episodes = _state(smashed)["episodes"]
        assert len(episodes) == 30
        for name, sparsity in _state(smashed)["allocation"].items():
            assert sparsity <= 0.8 + 1e-9, name  # amc_sparsity caps every layer
            kept = smashed.model.get_submodule(name).weight.shape[0]
            assert kept % 8 == 0, (name, kept)  # channel_round
        assert count_parameters(smashed.model) < count_parameters(base)
        with torch.no_grad():
            assert torch.isfinite(run_model(smashed, inputs)).all()
        assert digits_accuracy(smashed) > 0.2
