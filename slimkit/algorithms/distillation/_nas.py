"""The steps of ``spos_search`` (not an algorithm): train the supernet, search it, measure the result.

``autoslim`` and ``bignas`` share the example batch, the limits and the search; ``owner`` names the algorithm in
errors and in the hyperparameters they point at.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from slimkit.algorithms.recovery._training import validation_loss
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import integer, real
from slimkit.engines.nas import EvolutionSearchLoop, NasMutator, SearchResult, calibrate_bn, measure_subnet
from slimkit.errors import ConfigError, DataError
from slimkit.evaluation import count_macs
from slimkit.evaluation.runtime import eval_mode
from slimkit.training import BatchLoss, FitResult, default_loss, fit, split_batch
from slimkit.utils import model_device, move_inputs


def evolution_hyperparameters() -> list:
    """The evolution search's settings (``EvolutionSearchLoop``), shared by every algorithm that runs it."""
    return [
        integer("num_candidates", 2, 1000, 16, "Population of each evolution epoch."),
        integer("top_k", 1, 1000, 4, "Best subnets kept as parents."),
        integer("max_epochs", 1, 1000, 4, "Evolution epochs."),
        real("mutate_prob", 0.0, 1.0, 0.2, "Chance that a child resamples each width of its parent."),
        real("crossover_prob", 0.0, 1.0, 0.5, "Chance that a crossover child takes each width from parent 2."),
    ]


def example_batch(smash_config: SmashConfigPrefixWrapper, model: nn.Module, owner: str = "spos_search") -> Any:
    """One input sample (the first train example) on ``model``'s device: traced for the channels, counted for FLOPs."""
    batch = next(iter(smash_config.data.train_dataloader(batch_size=1, shuffle=False)), None)
    if batch is None:
        raise DataError(f"{owner}: the train split is empty; add data with training examples "
                        "(cfg.add_data('Digits') or cfg.add_data((train, val, test))).")
    inputs, _ = split_batch(batch)
    return move_inputs(inputs, model_device(model))


def train_on_data(net: nn.Module, cfg: SmashConfigPrefixWrapper, loss: BatchLoss, seed: int, desc: str,
                  prefix: str = "supernet_") -> FitResult:
    """Slimkit's training loop over the train split (shuffled from ``seed``), ``{prefix}epochs/steps/lr`` long."""
    loader = cfg.data.train_dataloader(batch_size=int(cfg["batch_size"]), shuffle=True,
                                       generator=torch.Generator().manual_seed(seed))
    steps, threads = int(cfg[f"{prefix}steps"]), int(cfg["num_threads"])
    return fit(net, loader, loss=loss, lr=float(cfg[f"{prefix}lr"]), epochs=int(cfg[f"{prefix}epochs"]),
               steps=steps or None, seed=seed, num_threads=threads or None, desc=desc)


def train_supernet(supernet: nn.Module, smash_config: SmashConfigPrefixWrapper, objective: BatchLoss | None,
                   seed: int) -> FitResult:
    """SPOS: every step trains one uniformly sampled subnet (choices drawn from ``seed``) on ``objective``."""
    mutator, rng = NasMutator(supernet), random.Random(seed)
    loss = objective or default_loss

    def path_loss(model: nn.Module, batch: Any) -> torch.Tensor:
        mutator.set_choices(mutator.sample_choices(rng))
        return loss(model, batch)

    return train_on_data(supernet, smash_config, path_loss, seed, "spos_search supernet")


def flops_limit(smash_config: SmashConfigPrefixWrapper, model: nn.Module, example: Any) -> tuple[float, float]:
    """(FLOPs of ``model`` on ``example``, the FLOPs limit: ``flops_ratio`` of it and ``max_flops``, the tighter)."""
    with eval_mode(model):
        flops = 2.0 * count_macs(model, example)
    limits = [flops * float(smash_config["flops_ratio"])]
    if float(smash_config["max_flops"]) > 0:
        limits.append(float(smash_config["max_flops"]))
    return flops, min(limits)


def constraints(smash_config: SmashConfigPrefixWrapper, limit: float) -> dict[str, float]:
    """The search's ``constraints_range``: the FLOPs limit, and ``max_params`` when set."""
    out = {"flops": limit}
    if float(smash_config["max_params"]) > 0:
        out["params"] = float(smash_config["max_params"])
    return out


def _hint(owner: str) -> str:
    return (f"Raise {owner}_flops_ratio / {owner}_max_flops / {owner}_max_params, or add smaller "
            f"{owner}_width_ratios.")


def check_reachable(supernet: nn.Module, example: Any, limits: dict[str, float], owner: str = "spos_search") -> None:
    """Fail before any training when even the narrowest subnet breaks a limit (say by how much)."""
    narrowest = {name: choices[0] for name, choices in NasMutator(supernet).search_space().items()}
    metrics = measure_subnet(supernet, narrowest, limits, example)
    over = [f"{k} {metrics[k]:,.0f} > limit {v:,.0f}" for k, v in limits.items() if metrics[k] > v]
    if over:
        raise ConfigError(f"{owner}: no subnet meets the limits; even the narrowest one (every width at its "
                          f"smallest choice: {narrowest}) has {'; '.join(over)}. {_hint(owner)}")


def scoring_hyperparameters() -> list:
    """How :func:`scoring` scores a candidate: BatchNorm recalibration and validation batches."""
    return [
        integer("calibrate_batches", 0, 10**5, 4, "Train batches recomputing each candidate's BatchNorm statistics."),
        integer("score_batches", 1, 10**5, 8, "Validation batches that score each candidate."),
    ]


def scoring(smash_config: SmashConfigPrefixWrapper, seed: int) -> tuple[Callable[[nn.Module], float],
                                                                    Callable[[nn.Module], Any] | None]:
    """(minus the validation loss over ``score_batches``, BatchNorm recalibration on ``calibrate_batches``)."""
    batch_size = int(smash_config["batch_size"])
    try:
        scored = smash_config.data.val_dataloader(batch_size=batch_size)
    except DataError:
        scored = smash_config.data.train_dataloader(batch_size=batch_size)
    calibration = smash_config.data.train_dataloader(batch_size=batch_size, shuffle=True,
                                                     generator=torch.Generator().manual_seed(seed))
    n_cal, n_score = int(smash_config["calibrate_batches"]), int(smash_config["score_batches"])
    return ((lambda m: -validation_loss(m, scored, max_batches=n_score)),
            (lambda m: calibrate_bn(m, calibration, n_cal)) if n_cal else None)


def search(supernet: nn.Module, smash_config: SmashConfigPrefixWrapper, example: Any, limit: float,
           seed: int, owner: str = "spos_search") -> SearchResult:
    """Evolution search for the subnet with the lowest validation loss under the FLOPs / params limits."""
    score_fn, calibrate_fn = scoring(smash_config, seed)
    candidates, top_k = int(smash_config["num_candidates"]), int(smash_config["top_k"])
    children = max(0, candidates - top_k)
    try:
        loop = EvolutionSearchLoop(
            supernet, score_fn, example_inputs=example,
            max_epochs=int(smash_config["max_epochs"]), num_candidates=candidates, top_k=top_k,
            num_mutation=children // 2, num_crossover=children - children // 2,
            mutate_prob=float(smash_config["mutate_prob"]), crossover_prob=float(smash_config["crossover_prob"]),
            constraints_range=constraints(smash_config, limit), score_key="neg_val_loss",
            calibrate_fn=calibrate_fn, seed=seed,
            units="slimkit")
        return loop.run()
    except ConfigError as exc:
        raise ConfigError(f"{owner}: {exc} {_hint(owner)}") from exc
