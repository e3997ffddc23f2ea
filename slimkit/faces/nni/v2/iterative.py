"""NNI 2.x's iterative pruners: ``LinearPruner``, ``AGPPruner``, ``LotteryTicketPruner``.

Each runs ``total_iteration`` rounds. Round ``i`` prunes the model to that round's sparsity with the basic
pruner ``pruning_algorithm`` names (masks only grow: units pruned earlier stay pruned), then optionally
removes the channels (``speedup=True``), fine-tunes (``finetuner(model)``) and scores the model
(``evaluator(model)``). ``get_best_result()`` returns ``(round, model, masks, score, config_list)`` of the best
round (the last one without an evaluator); the model is a copy taken at the end of that round, so with
``speedup=True`` it has that round's shapes. Schedules, for a final sparsity ``s`` over ``n`` rounds:
linear ``s * i / n``; AGP ``s * (1 - (1 - i / n)^3)``; lottery ticket ``1 - (1 - s)^(i / n)``, with the
weights rewound to their values before pruning after every round (``reset_weight=True``).
Results stay in memory; nothing is written to ``log_dir``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from slimkit.engines.config_list import select_layers
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.maskers import num_to_prune
from slimkit.engines.pruning.training import check_positive_int
from slimkit.errors import closest
from slimkit.faces.nni.v2.base import V2Masks, V2Pruner, check_schedule, to_v1_masks, v2_masks
from slimkit.faces.nni.v2.basic import FPGMPruner, L1NormPruner, L2NormPruner, LevelPruner
from slimkit.faces.nni.v2.legacy import LegacyAGP, is_legacy_agp_call, legacy_agp
from slimkit.faces.nni.v2.speedup import ModelSpeedup
from slimkit.faces.nni.v2.trace import rebuild
from slimkit.faces.nni.v2.trained import (
    ActivationAPoZRankPruner,
    ActivationMeanRankPruner,
    SlimPruner,
    TaylorFOWeightPruner,
)
from slimkit.faces.nni.v2.training import ADMMPruner
from slimkit.faces.nni.v3.scheduled import check_schedule_v3, run_schedule

__all__ = ["AGPPruner", "LinearPruner", "LotteryTicketPruner", "PRUNER_DICT"]

#: NNI 2.x's names of the basic pruners an iterative pruner runs each round
PRUNER_DICT: dict[str, type] = {
    "level": LevelPruner, "l1": L1NormPruner, "l2": L2NormPruner, "fpgm": FPGMPruner, "slim": SlimPruner,
    "apoz": ActivationAPoZRankPruner, "mean_activation": ActivationMeanRankPruner, "taylorfo": TaylorFOWeightPruner,
    "admm": ADMMPruner,
}
_SPARSITY_KEYS = ("sparsity", "sparsity_per_layer", "total_sparsity")


@dataclass
class RoundResult:
    """One round: its number, the masks it produced, the evaluator's score and the config it pruned with."""

    task_id: int
    masks: V2Masks
    score: float | None
    config_list: list[dict[str, Any]]


class _IterativePruner:
    """The scheduler shared by the three iterative pruners; subclasses define :meth:`ratio`."""

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]] | Any = None,
                 pruning_algorithm: str | Any = None, total_iteration: int | Any = None, log_dir: str = ".",
                 keep_intermediate_result: bool = False, finetuner: Callable[[nn.Module], Any] | None = None,
                 speedup: bool = False, dummy_input: Any = None, evaluator: Any = None,
                 pruning_params: Mapping[str, Any] | None = None, reset_weight: bool = False,
                 **v3_kwargs: Any) -> None:
        name = type(self).__name__
        self._sub: V2Pruner | None = None
        self._legacy: LegacyAGP | None = None
        if name == "AGPPruner" and is_legacy_agp_call(pruning_algorithm, v3_kwargs):  # NNI 2.0-2.5
            self._legacy = legacy_agp(model, config_list, (pruning_algorithm, total_iteration, log_dir), v3_kwargs)
            self.bound_model = model
            return
        if isinstance(model, V2Pruner):  # NNI 3.0: (pruner, interval_steps, total_times, evaluator=None)
            self.interval_steps = v3_kwargs.pop("interval_steps", config_list)
            self.total_iteration = v3_kwargs.pop("total_times", pruning_algorithm)
            chosen = evaluator if evaluator is not None else total_iteration
            if v3_kwargs:
                raise PruningConfigError(f"{name} got unexpected argument(s) {', '.join(sorted(v3_kwargs))}.")
            self._evaluator = check_schedule_v3(name, model, self.interval_steps, self.total_iteration, chosen)
            self._sub, self.bound_model = model, model.bound_model
            return
        if v3_kwargs:
            raise PruningConfigError(f"{name} got unexpected argument(s) {', '.join(sorted(v3_kwargs))}; NNI 3.0's "
                                     f"form is {name}(pruner, interval_steps, total_times, evaluator=None).")
        check_schedule(name, model, finetuner, evaluator, speedup, dummy_input)
        if pruning_algorithm not in PRUNER_DICT:
            raise PruningConfigError(f"{name} pruning_algorithm {pruning_algorithm!r} is unknown."
                                     f"{closest(str(pruning_algorithm), PRUNER_DICT)} Choose one of "
                                     f"{', '.join(PRUNER_DICT)}.")
        check_positive_int(name, "total_iteration", total_iteration)
        if speedup and reset_weight:
            raise PruningConfigError(f"{name}: reset_weight rewinds the weights of the unpruned model, which a speedup "
                                     "has reshaped; use speedup=False (then speed up the best result once).")
        if not isinstance(config_list, Sequence) or isinstance(config_list, (str, bytes)) or not config_list:
            raise PruningConfigError(f"{name} config_list must be a non-empty list of dicts, e.g. "
                                     "[{'sparsity': 0.8, 'op_types': ['Conv2d']}].")
        self.bound_model, self.config_list = model, [dict(c) for c in config_list]
        self.pruning_algorithm, self.total_iteration = pruning_algorithm, total_iteration
        self.log_dir, self.keep_intermediate_result = log_dir, keep_intermediate_result
        self.finetuner, self.evaluator, self.speedup, self.dummy_input = finetuner, evaluator, speedup, dummy_input
        self.pruning_params, self.reset_weight = dict(pruning_params or {}), reset_weight
        self.results: list[RoundResult] = []
        self._units: dict[str, int] = {}  # each layer's units before the first round (speedup shrinks them)
        self._best: tuple[RoundResult, nn.Module] | None = None

    def ratio(self, iteration: int, final: float) -> float:
        """The sparsity of round ``iteration`` (1..n) for a final sparsity ``final``."""
        raise NotImplementedError

    def _round_config(self, iteration: int) -> list[dict[str, Any]]:
        """The config of one round at that round's sparsity of the original layers.

        After speedups a layer has fewer units than it started with, so each ``sparsity`` entry becomes one entry
        per layer asking for the units still to go (``total_sparsity`` entries are ranked as a group: their share
        is rescaled by the sparsity already removed).
        """
        out = []
        default = PRUNER_DICT[self.pruning_algorithm].default_op_types  # what "default" selects for this pruner
        chosen = select_layers(self.bound_model, self.config_list, default, PruningConfigError) if self.speedup else {}
        for index, entry in enumerate(self.config_list):
            entry = copy.deepcopy(entry)
            keys = [k for k in _SPARSITY_KEYS if k in entry]
            if not keys or entry.get("exclude"):
                out.append(entry)
                continue
            target = self.ratio(iteration, float(entry[keys[0]]))
            if not self.speedup:
                entry[keys[0]] = min(target, 0.99)
            elif keys[0] == "total_sparsity":
                done = self.ratio(iteration - 1, float(entry[keys[0]])) if iteration > 1 else 0.0
                entry[keys[0]] = min(max((target - done) / (1.0 - done), 0.0), 0.99)
            else:
                for name in (n for n, i in chosen.items() if i == index):
                    units = self.bound_model.get_submodule(name).weight.shape[0]
                    original = self._units.setdefault(name, units)
                    keep = original - num_to_prune(target, original)
                    one = {k: v for k, v in entry.items() if k not in ("op_names", "op_partial_names", *keys)}
                    out.append({**one, "op_names": [name], keys[0]: (max(units - keep, 0) + 0.5) / units})
                continue
            out.append(entry)
        return out

    def _params(self) -> dict[str, Any]:
        params = dict(self.pruning_params)
        if "traced_optimizer" in params:  # a fresh optimizer on the current (possibly shrunk) parameters
            params["traced_optimizer"] = rebuild(params["traced_optimizer"], self.bound_model)
        if self.pruning_algorithm in ("l1", "l2", "fpgm", "apoz", "mean_activation", "taylorfo") and \
                self.dummy_input is not None and params.get("mode") == "dependency_aware":
            params.setdefault("dummy_input", self.dummy_input)
        return params

    def compress(self, max_steps: int | None = None, max_epochs: int | None = None) -> tuple[nn.Module, V2Masks] | None:
        """Run every round (see the module docstring); the results are in :meth:`get_best_result`.

        With NNI 3.0's arguments: ``total_times`` rounds of ``interval_steps`` steps, then ``(model, masks)``
        of the bound pruner (``max_steps``, when given, must cover them; the rounds set the duration).
        """
        if self._sub is not None:
            return run_schedule(self._sub, lambda t: self.ratio(t, 1.0), self.interval_steps,
                                self.total_iteration, self._evaluator, max_steps)
        if self._legacy is not None:
            return self._legacy.compress()  # type: ignore[return-value]
        self._compress_rounds()
        return None

    def __getattr__(self, name: str) -> Any:
        """NNI 2.0-2.5's AGPPruner is the AGP engine: ``get_pruned_weights``, ``export_model``... come from it."""
        legacy = self.__dict__.get("_legacy")
        if legacy is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(legacy.engine, name)

    def unwrap_model(self) -> None:
        """NNI 3.0: unwrap the bound pruner's layers, which keep ``weight * mask``."""
        if self._sub is None:
            raise PruningConfigError(f"{type(self).__name__}.unwrap_model() is NNI 3.0's; with NNI 2.x's arguments "
                                     "the model is unwrapped after every round.")
        self._sub._unwrap_model()

    def _compress_rounds(self) -> None:
        model = self.bound_model
        rewind = copy.deepcopy(model.state_dict()) if self.reset_weight else None
        masks: V2Masks = {}
        for iteration in range(1, self.total_iteration + 1):
            config = self._round_config(iteration)
            pruner = PRUNER_DICT[self.pruning_algorithm](model, config, **self._params())
            if masks and not self.speedup:  # continue from the last round's masks: pruned units stay pruned
                known = {w.name: w for w in pruner.get_modules_wrapper()}
                for name, layer in to_v1_masks(masks).items():
                    if name in known:
                        pruner._store_masks(known[name], {k: v for k, v in layer.items() if v is not None})
            _, masks = pruner.compress()
            if rewind is not None:
                pruner._unwrap_model()
                model.load_state_dict(rewind)
                pruner._wrap_model()
            score = self._finish_round(pruner, masks)
            result = RoundResult(iteration, masks, score, config)
            if self.keep_intermediate_result or not self.results:
                self.results.append(result)
            else:
                self.results[-1] = result
            best = self._best[0] if self._best else None
            if best is None or self.evaluator is None or (score is not None and best.score is not None and
                                                          score >= best.score):
                # a copy: later rounds keep pruning (and with speedup=True shrinking) the model they share
                self._best = (result, copy.deepcopy(model))

    def _finish_round(self, pruner: Any, masks: V2Masks) -> float | None:
        model = self.bound_model
        if self.finetuner is not None and not self.speedup:
            self.finetuner(model)  # wrapped: pruned weights stay out of the forward pass
        pruner.unwrap_model(apply_masks=True)
        if self.speedup:
            ModelSpeedup(model, self.dummy_input, masks).speedup_model()
            if self.finetuner is not None:
                self.finetuner(model)  # on the shrunk model
        return None if self.evaluator is None else float(self.evaluator(model))

    def get_masks(self) -> V2Masks:
        """NNI 3.0: the masks of the pruner this schedule drives, ``{layer: {"weight": mask, "bias": mask}}``."""
        if self._sub is None:
            raise PruningConfigError(f"{type(self).__name__}.get_masks() belongs to NNI 3.0's form "
                                     f"{type(self).__name__}(pruner, interval_steps, total_times); NNI 2.x's form "
                                     "gives the masks in get_best_result().")
        return v2_masks(self._sub)

    def get_best_result(self) -> tuple[int, nn.Module, V2Masks, float | None, list[dict[str, Any]]]:
        """``(round, model, masks, score, config_list)`` of the best round (the last one without an evaluator)."""
        if self._best is None:
            raise PruningConfigError(f"{type(self).__name__}.get_best_result() before compress(); call compress().")
        result, model = self._best
        return result.task_id, model, result.masks, result.score, result.config_list

    def _wrap_model(self) -> None:
        """NNI 2.x keeps this for compatibility; an iterative pruner wraps the model only inside each round."""

    def _unwrap_model(self) -> None:
        """NNI 2.x keeps this for compatibility; the model is unwrapped after every round."""


class LinearPruner(_IterativePruner):
    """Iterative pruning with a linear schedule: round ``i`` of ``n`` prunes to ``s * i / n``.

    NNI 3.0: ``LinearPruner(pruner, interval_steps, total_times, evaluator=None)`` then
    ``compress(max_steps, max_epochs) -> (model, masks)``: the bound pruner's sparsity rises over ``total_times``
    rounds of ``interval_steps`` training steps (:mod:`slimkit.faces.nni.v3.scheduled`). NNI 2.x:
    ``LinearPruner(model, config_list, pruning_algorithm, total_iteration, log_dir=".",
    keep_intermediate_result=False, finetuner=None, speedup=False, dummy_input=None, evaluator=None,
    pruning_params={})``.
    """

    def ratio(self, iteration: int, final: float) -> float:
        """``final * i / n``."""
        return final * iteration / self.total_iteration


class AGPPruner(_IterativePruner):
    """Iterative pruning on AGP's cubic schedule: round ``i`` of ``n`` prunes to ``s * (1 - (1 - i / n)^3)``.

    Same arguments (NNI 2.x's or 3.0's) as :class:`LinearPruner`; large steps first, small ones as the model gets
    sparse.
    """

    def ratio(self, iteration: int, final: float) -> float:
        """``final * (1 - (1 - i / n)^3)``."""
        return final * (1.0 - (1.0 - iteration / self.total_iteration) ** 3)


class LotteryTicketPruner(_IterativePruner):
    """Iterative magnitude pruning with weight rewinding (Frankle & Carbin, 2019), NNI 2.x signature.

    Round ``i`` of ``n`` prunes to ``1 - (1 - s)^(i / n)``; with ``reset_weight=True`` (default) the surviving
    weights are rewound to their values before the first round, then ``finetuner`` trains the ticket.
    """

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]], pruning_algorithm: str,
                 total_iteration: int, log_dir: str = ".", keep_intermediate_result: bool = False,
                 finetuner: Callable[[nn.Module], Any] | None = None, speedup: bool = False,
                 dummy_input: Any = None, evaluator: Callable[[nn.Module], float] | None = None,
                 reset_weight: bool = True, pruning_params: Mapping[str, Any] | None = None) -> None:
        super().__init__(model, config_list, pruning_algorithm, total_iteration, log_dir, keep_intermediate_result,
                         finetuner, speedup, dummy_input, evaluator, pruning_params, reset_weight)

    def ratio(self, iteration: int, final: float) -> float:
        """``1 - (1 - final)^(i / n)``."""
        return 1.0 - (1.0 - final) ** (iteration / self.total_iteration)


