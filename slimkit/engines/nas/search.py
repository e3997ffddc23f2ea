"""EvolutionSearchLoop: evolution search over a trained supernet's subnets under cost constraints (MMRazor's loop).

Each epoch scores the population on the supernet (``score_fn``, after an optional ``calibrate_fn``), keeps the
``top_k`` best seen so far, and breeds the next population: ``num_mutation`` children of random top-k parents
(each choice resampled with ``mutate_prob``) and ``num_crossover`` children of two parents (each choice from
the second with ``crossover_prob``); random subnets fill it up to ``num_candidates``. Every subnet must satisfy
``constraints_range`` (see :mod:`slimkit.engines.nas.constraints`; ``units="mmrazor"``, the default, reads
``flops=(0, 330)`` as MMRazor does: millions of MACs); sampling stops after ``max_sample_attempts`` draws per
phase, and a range no subnet can meet is reported before the search starts (exact bounds for one-shot op
search spaces, else after the first fruitless draws). All randomness comes from one ``random.Random(seed)``,
and the whole state (population, top k, scores, RNG) is written atomically to ``state_file`` after each epoch,
so ``resume_from`` continues a run exactly where it stopped.
"""

from __future__ import annotations

import json
import logging
import os
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn
from tqdm.auto import tqdm

from slimkit.core.io import write_json_atomic
from slimkit.core.registry import build_module, register_component
from slimkit.engines.nas.constraints import check_units, measure_subnet, parse_constraints, violated
from slimkit.engines.nas.feasibility import FeasibilityMixin
from slimkit.engines.nas.mutator import NasMutator, Subnet, subnet_key, unwrap
from slimkit.engines.nas.search_inputs import calibration, evaluator_score, example_from, score_subnet
from slimkit.errors import ConfigError, SaveLoadError, check_int, check_number

log = logging.getLogger(__name__)
STATE_VERSION = 1
_EARLY_CHECK = 30  # fruitless random draws after which reachability is checked


@dataclass
class SearchResult:
    """The best subnet found, its score and metrics, the final top k and the best score after each epoch."""

    best_subnet: dict[str, dict[str, Any]]
    best_score: float
    metrics: dict[str, float]
    top_k: list[dict[str, Any]] = field(default_factory=list)
    history: list[float] = field(default_factory=list)
    evaluated: int = 0


class EvolutionSearchLoop(FeasibilityMixin):
    """Search ``model``'s subnets (an :class:`SPOS` or a supernet module) for the best ``score_fn`` under limits.

    ``score_fn(model)``: a number or a dict of metrics (``score_key`` picks one; higher is better), called in
    eval mode without gradients with the candidate active -- or MMRazor's ``dataloader`` + ``evaluator``
    (``dict(type='Accuracy', topk=(1, 5))`` scores ``"accuracy/top1"``, the default ``score_key`` then; see
    :mod:`~slimkit.engines.nas.search_inputs`). ``calibrate_fn(model)``: runs first on every candidate (e.g.
    ``lambda m: calibrate_bn(m, batches)``), or MMRazor's ``calibrate_sample_num`` samples of
    ``calibrate_dataloader`` (default: ``dataloader``). ``example_inputs``: one batch for counting FLOPs / timing
    latency (default: zeros of ``estimator_cfg["input_shape"]``, else the dataloader's first sample).
    ``constraints_range``: e.g. ``dict(flops=(0, 330), params=2.5)`` in ``units`` (``"mmrazor"``: flops and
    macs in millions of MACs, params in millions; ``"slimkit"``: flops = 2 x MACs and params counted);
    latency in milliseconds (a latency constraint depends on timings, so such a search repeats only as far as
    the timings do).
    """

    def __init__(self, model: nn.Module, score_fn: Callable[[nn.Module], float | Mapping[str, float]] | None = None,
                 example_inputs: Any = None, max_epochs: int = 20, num_candidates: int = 50, top_k: int = 10,
                 num_mutation: int = 25, num_crossover: int = 25, mutate_prob: float = 0.1,
                 crossover_prob: float = 0.5, constraints_range: Mapping[str, Any] | None = None,
                 score_key: str | None = None, max_sample_attempts: int | None = None,
                 calibrate_fn: Callable[[nn.Module], Any] | None = None, resume_from: str | os.PathLike | None = None,
                 state_file: str | os.PathLike | None = None, seed: int = 0, latency_threads: int = 1,
                 progress: bool = True, dataloader: Any = None, evaluator: Any = None,
                 calibrate_sample_num: int = -1, calibrate_dataloader: Any = None,
                 estimator_cfg: Mapping[str, Any] | None = None, units: str = "mmrazor") -> None:
        model = build_module(model, "model")
        if (score_fn is None) == (evaluator is None) or (evaluator is not None and dataloader is None):
            raise ConfigError("EvolutionSearchLoop scores candidates with score_fn= (model -> number or dict of "
                              "metrics) or with dataloader= (your batches) and evaluator= (e.g. "
                              "dict(type='Accuracy', topk=(1, 5))): give one of the two.")
        if score_fn is not None and not callable(score_fn):
            raise ConfigError(f"score_fn must be callable (model -> number or dict), got {type(score_fn).__name__}.")
        if score_fn is None:
            score_fn = evaluator_score(dataloader, evaluator)
            score_key = score_key or "accuracy/top1"
        if example_inputs is None:
            example_inputs = example_from(dataloader, estimator_cfg)
        if calibrate_fn is None:
            calibrate_fn = calibration(calibrate_sample_num, calibrate_dataloader or dataloader)
        self.model, self.score_fn, self.calibrate_fn = model, score_fn, calibrate_fn
        self.supernet = unwrap(model)
        self.mutator = getattr(model, "mutator", None) or NasMutator(self.supernet)
        self.example_inputs, self.score_key = example_inputs, score_key or "accuracy"
        self.max_epochs = check_int("max_epochs", max_epochs)
        self.num_candidates, self.top_k = check_int("num_candidates", num_candidates), check_int("top_k", top_k)
        self.num_mutation = check_int("num_mutation", num_mutation, 0)
        self.num_crossover = check_int("num_crossover", num_crossover, 0)
        if num_mutation + num_crossover > num_candidates or top_k > num_candidates:
            raise ConfigError(f"num_mutation + num_crossover ({num_mutation} + {num_crossover}) and top_k ({top_k}) "
                              f"must not exceed num_candidates ({num_candidates}).")
        self.mutate_prob = check_number("mutate_prob", mutate_prob, 0, 1, meaning="a probability")
        self.crossover_prob = check_number("crossover_prob", crossover_prob, 0, 1, meaning="a probability")
        self.units = check_units(units)
        self.ranges = parse_constraints(constraints_range, self.units)
        self.feasible = False
        self.max_sample_attempts = check_int("max_sample_attempts", max_sample_attempts or 20 * num_candidates)
        self.state_file = None if state_file is None else Path(state_file)
        self.seed, self.latency_threads, self.progress = check_int("seed", seed, 0), latency_threads, progress
        self.rng = random.Random(seed)
        self.epoch, self.candidates, self.top = 0, [], []
        self.scores: dict[str, dict[str, Any]] = {}
        self.costs: dict[str, dict[str, float]] = {}
        self.history: list[float] = []
        if resume_from is not None:
            self.load_state(resume_from)

    # ------------------------------------------------------------------ constraints
    def cost(self, subnet: Subnet) -> dict[str, float]:
        """The constrained metrics of ``subnet`` (cached)."""
        key = subnet_key(subnet)
        if key not in self.costs:
            self.costs[key] = measure_subnet(self.supernet, subnet, self.ranges, self.example_inputs,
                                             self.latency_threads)
        return self.costs[key]

    def is_valid(self, subnet: Subnet) -> bool:
        """Whether ``subnet`` meets every constraint."""
        return not self.ranges or not violated(self.cost(subnet), self.ranges)

    # ------------------------------------------------------------------ population
    def _fill(self, population: list[Subnet], make: Callable[[], Subnet], target: int) -> None:
        keys = {subnet_key(s) for s in population}
        for _ in range(self.max_sample_attempts):
            if len(population) >= target:
                return
            child = make()
            if subnet_key(child) not in keys and self.is_valid(child):
                population.append(child)
                keys.add(subnet_key(child))

    def sample_candidates(self) -> None:
        """Fill the population with random valid subnets up to ``num_candidates`` (error when none is valid)."""
        tried: list[Subnet] = []
        if self.ranges and not self.feasible:
            self.check_feasible()

        def draw() -> Subnet:
            if len(tried) == _EARLY_CHECK and not self.candidates and not self.feasible:
                error = self._no_subnet_error(tried, final=False)  # nothing valid yet: is anything reachable?
                if error is not None:
                    raise error
            tried.append(self.mutator.sample_choices(self.rng))
            return tried[-1]

        self._fill(self.candidates, draw, self.num_candidates)
        self.feasible = self.feasible or bool(self.candidates)
        if not self.candidates:
            raise self._no_subnet_error(tried)
        if len(self.candidates) < self.num_candidates:
            log.warning("Only %d of %d candidates met the constraints after %d attempts.", len(self.candidates),
                        self.num_candidates, self.max_sample_attempts)

    def score(self, subnet: Subnet) -> float:
        """``score_fn`` of ``subnet`` on the supernet (after ``calibrate_fn``), cached."""
        key = subnet_key(subnet)
        if key not in self.scores:
            metrics = {k: float(v) for k, v in score_subnet(self.model, self.mutator, subnet, self.score_fn,
                                                            self.calibrate_fn, self.score_key).items()}
            self.scores[key] = {"subnet": dict(subnet), "score": metrics[self.score_key],
                                "metrics": {**metrics, **(self.cost(subnet) if self.ranges else {})}}
        return self.scores[key]["score"]

    def run_epoch(self) -> None:
        """Score the population, update the top k, breed the next population."""
        self.sample_candidates()
        for subnet in self.candidates:
            self.score(subnet)
        pool = {subnet_key(s): s for s in [*self.top, *self.candidates]}
        ranked = sorted(pool, key=lambda k: (-self.scores[k]["score"], k))
        self.top = [pool[k] for k in ranked[: self.top_k]]
        self.history.append(self.scores[ranked[0]]["score"])
        children: list[Subnet] = []
        self._fill(children, lambda: self.mutator.mutate(self.rng.choice(self.top), self.mutate_prob, self.rng),
                   self.num_mutation)
        self._fill(children, lambda: self.mutator.crossover(self.rng.choice(self.top), self.rng.choice(self.top),
                                                            self.crossover_prob, self.rng),
                   len(children) + self.num_crossover)
        self.candidates = children
        self.epoch += 1

    def run(self) -> SearchResult:
        """Run the remaining epochs (saving the state after each) and return the best subnet.

        The best subnet is left active (and calibrated by ``calibrate_fn``), ready for :func:`save_subnet`.
        """
        bar = tqdm(total=self.max_epochs, initial=min(self.epoch, self.max_epochs), desc="evolution search",
                   leave=False, disable=None if self.progress else True)
        try:
            while self.epoch < self.max_epochs:
                self.run_epoch()
                if self.state_file is not None:
                    self.save_state(self.state_file)
                bar.update(1)
                bar.set_postfix(best=f"{self.history[-1]:.4g}", refresh=False)
        finally:
            bar.close()
        best = self.scores[subnet_key(self.top[0])]
        self.mutator.set_choices(self.top[0])
        if self.calibrate_fn is not None:  # the supernet's BN statistics now fit the best subnet (for export)
            self.calibrate_fn(self.model)
        return SearchResult(self.mutator.fix_subnet(self.top[0]), best["score"], dict(best["metrics"]),
                            [dict(self.scores[subnet_key(s)]) for s in self.top], list(self.history), len(self.scores))

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The JSON-able search state (population, top k, caches, RNG state, epoch)."""
        version, internal, gauss = self.rng.getstate()
        return {"version": STATE_VERSION, "epoch": self.epoch, "seed": self.seed,
                "search_space": self.mutator.search_space(), "constraints_range": self.ranges,
                "rng": [version, list(internal), gauss], "candidates": self.candidates, "top_k": self.top,
                "scores": self.scores, "costs": self.costs, "history": self.history}

    def save_state(self, path: str | os.PathLike) -> Path:
        """Write :meth:`state_dict` to ``path`` atomically."""
        return write_json_atomic(path, self.state_dict(), indent=None)

    def load_state(self, path: str | os.PathLike) -> None:
        """Continue from a state written by :meth:`save_state` (the search space must be the same)."""
        path = Path(path)
        try:
            state = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise SaveLoadError(f"Cannot resume from {path}: {exc}. Give a state file an earlier search "
                                "wrote.") from exc
        if state.get("version") != STATE_VERSION:
            raise SaveLoadError(f"{path} has search state version {state.get('version')!r}; this slimkit reads "
                                f"{STATE_VERSION}.")
        if json.dumps(state["search_space"], sort_keys=True) != json.dumps(self.mutator.search_space(), sort_keys=True):
            raise ConfigError(f"{path} was written for another search space; resume with the same supernet.")
        if {k: list(v) for k, v in self.ranges.items()} != state["constraints_range"]:
            raise ConfigError(f"{path} was searched under constraints_range {state['constraints_range']}, not "
                              f"{self.ranges}; resume with the same constraints.")
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.epoch, self.candidates, self.top = state["epoch"], state["candidates"], state["top_k"]
        self.scores, self.costs, self.history = state["scores"], state["costs"], state["history"]


register_component(EvolutionSearchLoop, "loop")
