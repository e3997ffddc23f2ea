"""Shared pieces of the smash pruners that train or search: hyperparameters, evaluator, fine-tuner.

Used by admm, lottery_ticket, movement, sensitivity, net_adapt, simulated_annealing, auto_compress and amc.

On the SmashConfig face the engines' user callbacks are built from ``cfg.data``:

* the *evaluator* scores a candidate on the validation split: accuracy (``metric="accuracy"``) or minus the
  mean loss (``"loss"``, e.g. language models). With ``eval_finetune_steps > 0`` a copy of the masked model is
  first fine-tuned that many steps, so candidates are compared after a little recovery (the weights of the
  model itself are untouched);
* the *fine-tuner* trains the masked model in place for a number of steps through :func:`slimkit.training.fit`.

Both use the same seeded train loader, so every candidate sees the same batches.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from ConfigSpace import CategoricalHyperparameter, UniformFloatHyperparameter
from torch import nn

from slimkit.algorithms.pruning._data import batch_hyperparameters, train_loader
from slimkit.algorithms.pruning._framework import FrameworkPruner
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import choice, integer, real
from slimkit.data import move_batch
from slimkit.engines.pruning import Pruner
from slimkit.engines.pruning.allocation import base_op_types
from slimkit.errors import DataError
from slimkit.evaluation import accuracy
from slimkit.training import default_loss, fit, make_optimizer
from slimkit.utils import model_device


def base_algo_hyperparameter(level: bool = True) -> CategoricalHyperparameter:
    """``base_algo``: how units are ranked inside a layer (filters by default, so the speedup can remove them)."""
    choices = ["l1", "l2", "fpgm", "level"] if level else ["l1", "l2", "fpgm"]
    return CategoricalHyperparameter(
        "base_algo", choices, default_value="l1",
        meta={"desc": "How units are ranked inside a layer: filter L1/L2 norm or geometric median (fpgm; removed "
                      "for real by the speedup)" + (", or single weights (level, unstructured)." if level else ".")})


def training_hyperparameters(lr: float = 1e-3) -> list:
    """Learning rate, optimizer, batch size and seed of the training the algorithm does."""
    return [
        real("lr", 1e-6, 1.0, lr, "Learning rate of the training the pruner does.", log=True),
        choice("optimizer", ["adam", "sgd"], "adam", "adam, or sgd with momentum 0.9."),
        *batch_hyperparameters(batches=None, batch_size=64),
        integer("seed", 0, 2**31 - 1, 0, "Seed of the data shuffling and of the search."),
    ]


def evaluator_hyperparameters(finetune_steps: int | None) -> list:
    """``metric`` and (unless ``finetune_steps`` is None) ``eval_finetune_steps`` of the candidate evaluator."""
    hps = [choice("metric", ["accuracy", "loss"], "accuracy", "What candidates are compared on, on the validation "
                  "split: accuracy, or the mean loss (lower is better).")]
    if finetune_steps is not None:
        hps.append(integer("eval_finetune_steps", 0, 100000, finetune_steps, "Optimizer steps a copy of each candidate "
                           "is fine-tuned before it is scored (0: scored as pruned)."))
    return hps


def cap_hyperparameter() -> UniformFloatHyperparameter:
    """``max_sparsity_per_layer``: the most any one layer may lose."""
    return real("max_sparsity_per_layer", 0.01, 0.99, 0.9, "No layer loses more than this share of its units.")


def with_cap(config_list: list[dict[str, Any]], smash_config: SmashConfigPrefixWrapper) -> list[dict[str, Any]]:
    """``config_list`` with ``max_sparsity_per_layer`` in every entry that does not set it (or excludes)."""
    cap = float(smash_config["max_sparsity_per_layer"])
    return [e if e.get("exclude") else {"max_sparsity_per_layer": cap, **e} for e in config_list]


def _val_loader(name: str, smash_config: SmashConfigPrefixWrapper) -> Any:
    if smash_config.data is None:
        raise DataError(f"{name} scores candidates on validation data; add some with cfg.add_data(...).")
    if getattr(smash_config.data, "val", None) is None:
        raise DataError(f"{name} scores candidates on the validation split, and the data has none; add data with a "
                        "val split (cfg.add_data((train, val, test), ...)).")
    return smash_config.data.val_dataloader(batch_size=256)


def mean_loss(model: nn.Module, loader: Any) -> float:
    """The default loss averaged over the batches of ``loader`` (no gradients)."""
    device, total, count = model_device(model), 0.0, 0
    with torch.no_grad():
        for batch in loader:
            total += float(default_loss(model, move_batch(batch, device)))
            count += 1
    if count == 0:
        raise DataError("The validation split yielded no batch to compute the loss on.")
    return total / count


def make_finetuner(name: str, smash_config: SmashConfigPrefixWrapper, steps: int) -> Callable[[nn.Module], Any] | None:
    """``fine_tune(model)``: ``steps`` optimizer steps on the seeded train loader (None when ``steps`` is 0)."""
    if steps <= 0:
        return None
    loader = train_loader(name, smash_config)

    def fine_tune(model: nn.Module) -> None:
        opt = make_optimizer(smash_config["optimizer"], model.parameters(), lr=float(smash_config["lr"]))
        fit(model, loader, optimizer=opt, steps=steps, seed=int(smash_config["seed"]), progress=False)

    return fine_tune


def make_evaluator(name: str, smash_config: SmashConfigPrefixWrapper,
                   finetune_steps: int | None = None) -> tuple[Callable[[nn.Module], float], str]:
    """``evaluate(model) -> metric`` on the validation split, and ``"maximize"``/``"minimize"`` for it.

    A copy of the model is fine-tuned ``finetune_steps`` steps first (default: ``eval_finetune_steps``).
    """
    val = _val_loader(name, smash_config)
    steps = int(smash_config["eval_finetune_steps"]) if finetune_steps is None else finetune_steps
    tune = make_finetuner(name, smash_config, steps)
    by_loss = smash_config["metric"] == "loss"

    def evaluate(model: nn.Module) -> float:
        if tune is not None:
            model = copy.deepcopy(model)
            with torch.enable_grad():
                tune(model)
            model.eval()
        return mean_loss(model, val) if by_loss else accuracy(model, val)

    return evaluate, "minimize" if by_loss else "maximize"


#: the annealing hyperparameters, handed to the engine under the same names
ANNEALING = ("start_temperature", "stop_temperature", "cool_down_rate", "perturbation_magnitude")


def annealing_hyperparameters() -> list:
    """The temperature schedule and the perturbation size (shared with auto_compress)."""
    return [
        real("start_temperature", 1e-3, 1e6, 100.0, "Initial temperature; worse candidates are accepted with "
             "probability exp(-drop in points / T).", log=True),
        real("stop_temperature", 1e-3, 1e6, 20.0, "The search stops when the temperature falls below this.", log=True),
        real("cool_down_rate", 0.01, 0.999, 0.9, "Temperature factor per step (more steps when closer to 1)."),
        real("perturbation_magnitude", 0.01, 1.0, 0.35, "Largest random change of a layer's share at the start "
             "(shrinks with the temperature)."),
    ]


class BaseAlgoPruner(FrameworkPruner):
    """A smash pruner whose engine ranks units with ``base_algo``: filters (shrunk by the speedup) or weights."""

    dataset_required = True
    #: the hyperparameter naming the ranking (AGP keeps NNI's ``pruning_algorithm``)
    ranking: ClassVar[str] = "base_algo"
    #: a search-only pruner: the chosen candidate is fine-tuned ``eval_finetune_steps`` steps, as it was when scored
    tune_chosen: ClassVar[bool] = False

    def op_types(self, smash_config: SmashConfigPrefixWrapper) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
        """Level pruning accepts any weighted layer; filter pruning Conv/Linear."""
        return base_op_types(smash_config[self.ranking])

    def uses_speedup(self, smash_config: SmashConfigPrefixWrapper) -> bool:
        """Filters can be removed; single weights cannot."""
        return smash_config[self.ranking] != "level" and bool(smash_config["speedup"])

    def run_pruner(self, pruner: Pruner, model: nn.Module, smash_config: SmashConfigPrefixWrapper) -> None:
        """Run the engine and record; a search-only pruner then fine-tunes the chosen model as it was scored."""
        super().run_pruner(pruner, model, smash_config)
        if self.tune_chosen:
            steps = smash_config.state["finetune_steps"] = int(smash_config["eval_finetune_steps"])
            tune = make_finetuner(self.algorithm_name, smash_config, steps)
            if tune is not None:
                tune(model)
