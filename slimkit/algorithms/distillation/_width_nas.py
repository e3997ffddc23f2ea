"""The shared part of ``autoslim`` and ``bignas`` (not an algorithm): a sandwich-trained width supernet.

``spos_search`` shares the width ratios, the models taken and the replay of a save.

The supernet is made from the model, trained with the sandwich rule and inplace distillation, and the searched
subnet exported as the plain narrower model.

Sandwich rule (Yu et al., "Universally Slimmable Networks", 2019): every step trains the widest subnet on the
labels, then the narrowest and ``num_random_samples`` random subnets on the widest one's softened predictions
(inplace distillation, KL at ``temperature``); the members' losses are averaged so one backward of
:func:`slimkit.training.fit` trains them all. The search itself (greedy for AutoSlim, evolution for BigNAS) is the
caller's.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

import torch
from ConfigSpace import Constant
from torch import nn

from slimkit.algorithms.distillation._nas import (
    check_reachable,
    constraints,
    example_batch,
    flops_limit,
    scoring_hyperparameters,
    train_on_data,
)
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import ConfigListHyperparameter, integer, real
from slimkit.engines.nas import ChannelSupernet, NasMutator, export_subnet, make_searchable
from slimkit.engines.nas.searchable import SUPPORTED_SHAPES, layer_shapes, resize_layers
from slimkit.errors import ConfigError
from slimkit.evaluation import count_macs
from slimkit.evaluation.runtime import eval_mode
from slimkit.training import FitResult, cross_entropy, split_batch
from slimkit.training.distill import KLDivergence
from slimkit.utils import main_tensor, run_model


class WidthRatios(ConfigListHyperparameter):
    """Width ratios such as ``[0.25, 0.5, 0.75, 1.0]`` (the full width is always a choice); not searchable."""

    def __init__(self, name: str, default_value: tuple[float, ...], meta: dict[str, Any]) -> None:
        Constant.__init__(self, name, tuple(default_value), meta=meta)  # the parent's default () is no ratio list

    def legal_value(self, value: Any) -> bool:  # type: ignore[override]
        """Accept a non-empty list of numbers in (0, 1]."""
        return isinstance(value, (list, tuple)) and bool(value) and all(
            type(v) in (int, float) and 0 < v <= 1 for v in value)

    def describe(self) -> str:
        """What the hyperparameter accepts."""
        return "a non-empty list of width ratios in (0, 1], e.g. [0.25, 0.5, 0.75, 1.0]"


#: what the width search needs of a model (for model_check_reason)
WIDTH_MODELS = f"It searches the channel widths of {SUPPORTED_SHAPES}; the model has no Conv2d or Linear layer."


def width_nas_hyperparameters() -> list:
    """Search space, FLOPs budget, sandwich training, candidate scoring, batch size, seed, threads."""
    return [
        WidthRatios("width_ratios", (0.25, 0.5, 0.75, 1.0), meta={
            "desc": "Width choices of every searchable channel group, as fractions of its width."}),
        integer("divisor", 1, 256, 1, "Round every width choice to a multiple of this (MMRazor's divisor, e.g. 8)."),
        real("flops_ratio", 0.01, 1.0, 0.5, "FLOPs budget as a fraction of the model's FLOPs."),
        real("max_flops", 0.0, 1e18, 0.0, "Absolute FLOPs budget per example (0: only flops_ratio)."),
        integer("supernet_epochs", 1, 1000, 3, "Passes over the train data while training the supernet."),
        integer("supernet_steps", 0, 10**7, 0, "Stop supernet training after this many steps (0: no limit)."),
        real("supernet_lr", 1e-7, 1.0, 3e-3, "Adam learning rate of the supernet training.", log=True),
        integer("num_random_samples", 0, 16, 2, "Random subnets per step besides the widest and the narrowest."),
        real("temperature", 0.1, 100.0, 1.0, "Softmax temperature of the inplace distillation."),
        *scoring_hyperparameters(),
        integer("batch_size", 1, 4096, 32, "Train batch size."),
        integer("seed", 0, 2**31 - 1, 0, "Seed of data shuffling and of the sampled subnets."),
        integer("num_threads", 0, 1024, 0, "CPU threads while training (0 keeps torch's setting)."),
    ]


def sandwich_loss(mutator: NasMutator, num_random: int, rng: random.Random, temperature: float
                  ) -> Callable[[nn.Module, Any], torch.Tensor]:
    """The sandwich-rule loss of one batch (see the module doc) for :func:`slimkit.training.fit`."""
    kl = KLDivergence(tau=temperature)

    def loss(model: nn.Module, batch: Any) -> torch.Tensor:
        inputs, targets = split_batch(batch)
        if targets is None:
            raise ConfigError("The sandwich rule trains the widest subnet on the batch targets; the data gives none.")
        members = [mutator.max_choices(), mutator.min_choices(), *(mutator.sample_choices(rng) for _ in
                                                                    range(num_random))]
        total, teacher = None, None
        for choices in members:
            mutator.set_choices(choices)
            logits = main_tensor(run_model(model, inputs))
            part = cross_entropy(logits, targets) if teacher is None else kl(logits, teacher)
            teacher = logits.detach() if teacher is None else teacher
            total = part if total is None else total + part
        return total / len(members)

    return loss


class WidthRun:
    """One run of a width NAS: the supernet and its FLOPs limit (``max_params``: the owner has that budget too)."""

    def __init__(self, model: nn.Module, smash_config: SmashConfigPrefixWrapper, owner: str,
                 max_params: bool = False) -> None:
        self.smash_config, self.owner, self.seed = smash_config, owner, int(smash_config["seed"])
        self.example = example_batch(smash_config, model, owner)
        self.flops, self.limit = flops_limit(smash_config, model, self.example)
        self.before = layer_shapes(model)
        self.supernet: ChannelSupernet = make_searchable(copy.deepcopy(model), self.example,
                                                         tuple(smash_config["width_ratios"]),
                                                         divisor=int(smash_config["divisor"]))
        if not self.supernet.widths:
            raise ConfigError(f"{owner}: the model has no searchable channel group. {WIDTH_MODELS}")
        self.mutator = NasMutator(self.supernet)
        limits = constraints(smash_config, self.limit) if max_params else {"flops": self.limit}
        check_reachable(self.supernet, self.example, limits, owner)

    def train(self) -> FitResult:
        """Sandwich-rule training of the supernet on the train split."""
        cfg = self.smash_config
        loss = sandwich_loss(self.mutator, int(cfg["num_random_samples"]), random.Random(self.seed),
                             float(cfg["temperature"]))
        return train_on_data(self.supernet, cfg, loss, self.seed, f"{self.owner} supernet")

    def export(self, subnet: dict[str, Any], training: bool) -> tuple[nn.Module, dict[str, Any]]:
        """The plain model of ``subnet`` and the state that rebuilds it; checks it computes the supernet's path."""
        self.mutator.set_choices(subnet)
        student = export_subnet(self.supernet, subnet).model
        with eval_mode(self.supernet), eval_mode(student), torch.no_grad():
            path = main_tensor(run_model(self.supernet, self.example))
            gap = float((main_tensor(run_model(student, self.example)) - path).abs().max())
            macs = count_macs(student, self.example)
        student.train(training)
        after = layer_shapes(student)
        state = {"subnet": subnet, "search_space": {f"widths.{n}": m.choices for n, m in self.supernet.widths.items()},
                 "layer_shapes": {n: s for n, s in after.items() if self.before.get(n) != s},
                 "flops_before": self.flops, "flops_limit": self.limit, "flops_after": 2.0 * macs,
                 "export_max_abs_diff": gap}
        return student, state


class WidthNasModels:
    """The models a width NAS takes, and the replay of its save (mixed into the width searches)."""

    algorithm_name: str

    def model_check_fn(self, model: Any) -> bool:
        """Needs a plain Conv2d or Linear layer."""
        return isinstance(model, nn.Module) and any(type(m) in (nn.Conv2d, nn.Linear) for m in model.modules())

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return WIDTH_MODELS

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Give a freshly built base model the searched layer shapes (the weights then load strictly)."""
        if "layer_shapes" not in state:
            raise ConfigError(f"The saved {self.algorithm_name} state has no 'layer_shapes'; the save is incomplete.")
        return resize_layers(model, state["layer_shapes"])
