"""NNI 2.x's search-driven pruners as schedulers: ``SimulatedAnnealingPruner``, ``AutoCompressPruner``, ``AMCPruner``.

NNI 2.x builds them from ``(model, config_list, evaluator, ...)`` (AutoCompress: ``(model, config_list,
total_iteration, admm_params, sa_params, ...)``; AMC: ``(total_episode, model, config_list, dummy_input,
evaluator, ...)``), runs ``compress()`` and reads ``get_best_result() -> (task_id, model, masks, score,
config_list)``. Each class runs slimkit's engine of the same name (:mod:`slimkit.engines.pruning`, the
algorithm the ``simulated_annealing`` / ``auto_compress`` / ``amc`` registry entries run):

* the search scores candidate allocations with ``evaluator(model)`` on the masked model, without fine-tuning
  them (NNI 2.x fine-tunes every candidate); the chosen allocation is then fine-tuned once with
  ``finetuner(model)`` while its masks hold the pruned weights at zero, unwrapped (masks multiplied in), sped up
  when ``speedup=True`` (AMC always, as in NNI), and scored;
* ``config_list`` takes NNI 2.x's keys: ``total_sparsity`` (the selected layers' sparsity together) and
  ``max_sparsity_per_layer`` (a number: each layer's cap); for AMC with ``target="flops"`` ``total_sparsity`` is
  the share of FLOPs to remove;
* ``task_id`` is how many candidates the search scored; ``masks`` describe the unshrunk model. Results stay in
  memory: nothing is written to ``log_dir``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from torch import nn

from slimkit.engines.pruning.amc import AMCEngine
from slimkit.engines.pruning.auto_compress import AutoCompressEngine
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.simulated_annealing import SimulatedAnnealingEngine
from slimkit.errors import closest
from slimkit.faces.nni.v2.base import V2Masks, call_trainer, check_schedule, check_training_args, v2_masks
from slimkit.faces.nni.v2.config import canonical_config_list
from slimkit.faces.nni.v2.speedup import ModelSpeedup

__all__ = ["AMCPruner", "AutoCompressPruner", "SimulatedAnnealingPruner"]

#: NNI 2.x pruning_algorithm names slimkit's search engines rank units with
_ANNEALING_ALGOS = ("level", "l1", "l2", "fpgm")
_AMC_ALGOS = ("l1", "l2", "fpgm")
_DDPG_KEYS = ("hidden1", "hidden2", "lr_c", "lr_a", "warmup", "discount", "bsize", "rmsize", "tau", "init_delta",
              "delta_decay", "window_length", "max_episode_length", "epsilon")
_SA_KEYS = ("evaluator", "start_temperature", "stop_temperature", "cool_down_rate", "perturbation_magnitude",
            "pruning_algorithm", "pruning_params")
_ADMM_KEYS = ("trainer", "traced_optimizer", "criterion", "iterations", "training_epochs", "granularity")


def _check_algorithm(who: str, algorithm: Any, allowed: tuple[str, ...], pruning_params: Any) -> str:
    if algorithm not in allowed:
        raise PruningConfigError(f"{who} pruning_algorithm {algorithm!r} is not one slimkit's search ranks units "
                                 f"with.{closest(str(algorithm), allowed)} Choose one of {', '.join(allowed)}.")
    if pruning_params:
        raise PruningConfigError(f"{who} pruning_params {sorted(pruning_params)}: the {algorithm!r} ranking takes "
                                 "no parameters here; remove them.")
    return str(algorithm)


def _check_keys(who: str, what: str, given: Any, allowed: Sequence[str]) -> dict[str, Any]:
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise PruningConfigError(f"{who} {what} must be a dict, got {type(given).__name__}.")
    unknown = sorted(k for k in given if k not in allowed)
    if unknown:
        raise PruningConfigError(f"{who} {what} has unknown keys {unknown}; it takes {', '.join(allowed)}.")
    return dict(given)


def search_config_list(who: str, model: nn.Module, config_list: Any, cap_key: str) -> list[dict[str, Any]]:
    """NNI 2.x's ``config_list`` for an allocation engine.

    ``total_sparsity`` becomes ``sparsity``, a numeric ``max_sparsity_per_layer`` becomes ``cap_key`` (per-layer
    dict caps are refused, with the way to write them).
    """
    if not isinstance(config_list, (list, tuple)):
        return canonical_config_list(model, config_list, "normal")[0]  # refuses it, saying what to write
    caps: dict[int, float] = {}
    plain = []
    for index, entry in enumerate(config_list):
        if isinstance(entry, Mapping) and "max_sparsity_per_layer" in entry:
            cap = entry["max_sparsity_per_layer"]
            if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0.0 < float(cap) <= 1.0:
                raise PruningConfigError(f"{who} config_list[{index}]['max_sparsity_per_layer'] must be a number in "
                                         f"(0, 1], got {cap!r}; for per-layer caps write one entry per layer "
                                         "({'op_names': [name], 'max_sparsity_per_layer': cap, ...}).")
            caps[index] = float(cap)
            entry = {k: v for k, v in entry.items() if k != "max_sparsity_per_layer"}
        plain.append(entry)
    translated, _ = canonical_config_list(model, plain, "normal")
    for index, cap in caps.items():
        if cap < 1.0:
            translated[index][cap_key] = cap
    return translated


class _SearchScheduler:
    """``compress()`` then ``get_best_result()`` around one allocation engine (see the module docstring)."""

    engine: Any

    def _setup(self, model: nn.Module, evaluator: Callable[[nn.Module], float] | None,
               finetuner: Callable[[nn.Module], Any] | None, speedup: bool, dummy_input: Any) -> None:
        who = type(self).__name__
        check_schedule(who, model, finetuner, None, speedup, dummy_input)
        if not callable(evaluator):
            raise PruningConfigError(f"{who} needs evaluator=fn(model) -> score (higher is better), which compares "
                                     f"the candidate allocations; got {type(evaluator).__name__}.")
        self.bound_model, self.evaluator, self.finetuner = model, evaluator, finetuner
        self.speedup, self.dummy_input = bool(speedup), dummy_input
        self._best: tuple[int, nn.Module, V2Masks, float, list[dict[str, Any]]] | None = None

    def compress(self) -> None:
        """Search, then fine-tune / unwrap / speed up / score the chosen allocation (see :meth:`get_best_result`)."""
        if self._best is not None:
            raise PruningConfigError(f"{type(self).__name__}.compress() already ran; read get_best_result().")
        engine = self.engine
        engine.compress()
        masks = v2_masks(engine)
        if self.finetuner is not None:
            self.finetuner(self.bound_model)  # wrapped: the masks keep the pruned weights out of the forward pass
        model = engine.unwrap_model(apply_masks=True)
        if self.speedup:
            ModelSpeedup(model, self.dummy_input, masks).speedup_model()
        score = float(self.evaluator(model))
        config_list = [{"op_names": [name], "total_sparsity": sparsity}
                       for name, sparsity in (engine.allocation or {}).items()]
        self._best = (len(engine.history), model, masks, score, config_list)

    def get_best_result(self) -> tuple[int, nn.Module, V2Masks, float, list[dict[str, Any]]]:
        """``(task_id, model, masks, score, config_list)`` of the chosen allocation."""
        if self._best is None:
            raise PruningConfigError(f"{type(self).__name__}.get_best_result() before compress(); call compress().")
        return self._best


class SimulatedAnnealingPruner(_SearchScheduler):
    """NNI 2.x's simulated annealing pruner on slimkit's ``simulated_annealing`` engine.

    ``SimulatedAnnealingPruner(model, config_list, evaluator, start_temperature=100, stop_temperature=20,
    cool_down_rate=0.9, perturbation_magnitude=0.35, pruning_algorithm="level", pruning_params={}, log_dir=".",
    keep_intermediate_result=False, finetuner=None, speedup=False, dummy_input=None)``.
    """

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]],
                 evaluator: Callable[[nn.Module], float] | None = None, start_temperature: float = 100,
                 stop_temperature: float = 20, cool_down_rate: float = 0.9, perturbation_magnitude: float = 0.35,
                 pruning_algorithm: str = "level", pruning_params: Mapping[str, Any] | None = None,
                 log_dir: str = ".", keep_intermediate_result: bool = False,
                 finetuner: Callable[[nn.Module], Any] | None = None, speedup: bool = False,
                 dummy_input: Any = None) -> None:
        who = type(self).__name__
        self._setup(model, evaluator, finetuner, speedup, dummy_input)
        algo = _check_algorithm(who, pruning_algorithm, _ANNEALING_ALGOS, pruning_params)
        self.engine = SimulatedAnnealingEngine(
            model, search_config_list(who, model, config_list, "max_sparsity_per_layer"), evaluator,
            base_algo=algo, start_temperature=start_temperature, stop_temperature=stop_temperature,
            cool_down_rate=cool_down_rate, perturbation_magnitude=perturbation_magnitude)


class AutoCompressPruner(_SearchScheduler):
    """NNI 2.x's AutoCompress pruner on slimkit's ``auto_compress`` engine.

    ``AutoCompressPruner(model, config_list, total_iteration, admm_params, sa_params, log_dir=".",
    keep_intermediate_result=False, finetuner=None, speedup=False, dummy_input=None, evaluator=None)``.

    ``admm_params``: ``trainer(model, optimizer, criterion)``, ``traced_optimizer``, ``criterion``, ``iterations``
    (default 30), ``training_epochs`` (default 5), ``granularity``; ``sa_params``: ``evaluator`` (or the
    ``evaluator`` argument), the annealing temperatures, ``pruning_algorithm`` (default ``"level"``). One ranking
    serves both stages, so ``granularity`` must agree with it: ``"fine-grained"`` with ``level``,
    ``"coarse-grained"`` with ``l1``/``l2``/``fpgm``.
    """

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]], total_iteration: int,
                 admm_params: Mapping[str, Any], sa_params: Mapping[str, Any], log_dir: str = ".",
                 keep_intermediate_result: bool = False, finetuner: Callable[[nn.Module], Any] | None = None,
                 speedup: bool = False, dummy_input: Any = None,
                 evaluator: Callable[[nn.Module], float] | None = None) -> None:
        who = type(self).__name__
        admm = _check_keys(who, "admm_params", admm_params, _ADMM_KEYS)
        sa = _check_keys(who, "sa_params", sa_params, _SA_KEYS)
        evaluator = sa.pop("evaluator", None) or evaluator
        self._setup(model, evaluator, finetuner, speedup, dummy_input)
        check_training_args(who, admm.get("trainer"), admm.get("traced_optimizer"), admm.get("criterion"))
        algo = _check_algorithm(who, sa.pop("pruning_algorithm", "level"), _ANNEALING_ALGOS,
                                sa.pop("pruning_params", None))
        granularity = admm.get("granularity", "fine-grained" if algo == "level" else "coarse-grained")
        if granularity != ("fine-grained" if algo == "level" else "coarse-grained"):
            raise PruningConfigError(f"{who}: admm_params granularity={granularity!r} disagrees with sa_params "
                                     f"pruning_algorithm={algo!r}; slimkit ranks both stages one way: use "
                                     "'fine-grained' with 'level' and 'coarse-grained' with 'l1', 'l2' or 'fpgm'.")
        self.engine = AutoCompressEngine(
            model, search_config_list(who, model, config_list, "max_sparsity_per_layer"),
            trainer=partial(call_trainer, admm["trainer"]), evaluator=evaluator, dummy_input=dummy_input,
            num_iterations=total_iteration, base_algo=algo, admm_num_iterations=admm.get("iterations", 30),
            admm_training_epochs=admm.get("training_epochs", 5), optimizer=admm["traced_optimizer"],
            criterion=admm["criterion"], **sa)


class AMCPruner(_SearchScheduler):
    """NNI 2.x's AMC pruner on slimkit's ``amc`` engine.

    ``AMCPruner(total_episode, model, config_list, dummy_input, evaluator, pruning_algorithm="l1", log_dir=".",
    keep_intermediate_result=False, finetuner=None, ddpg_params={}, pruning_params={}, target="flops")``.

    ``total_sparsity`` of the first selecting entry is the share of FLOPs to remove (``flops_ratio = 1 -
    total_sparsity``); ``max_sparsity_per_layer`` caps each layer. ``ddpg_params`` are the agent's (``hidden1``,
    ``hidden2``, ``lr_c``, ``lr_a``, ``warmup``, ``discount``, ``bsize``, ``rmsize``, ``tau``, ``init_delta``,
    ``delta_decay``; ``window_length``, ``max_episode_length`` and ``epsilon`` are accepted and change nothing).
    The result is always sped up, as in NNI.
    """

    def __init__(self, total_episode: int, model: nn.Module, config_list: Sequence[Mapping[str, Any]],
                 dummy_input: Any = None, evaluator: Callable[[nn.Module], float] | None = None,
                 pruning_algorithm: str = "l1", log_dir: str = ".", keep_intermediate_result: bool = False,
                 finetuner: Callable[[nn.Module], Any] | None = None, ddpg_params: Mapping[str, Any] | None = None,
                 pruning_params: Mapping[str, Any] | None = None, target: str = "flops") -> None:
        who = type(self).__name__
        if dummy_input is None:
            raise PruningConfigError(f"{who} needs dummy_input, an input the model accepts: it counts FLOPs and "
                                     "traces the channels on it (AMCPruner(total_episode, model, config_list, "
                                     "dummy_input, evaluator)).")
        self._setup(model, evaluator, finetuner, True, dummy_input)
        if target != "flops":
            raise PruningConfigError(f"{who} target={target!r}: slimkit's AMC budgets FLOPs (multiply-accumulates); "
                                     "use target='flops'.")
        algo = _check_algorithm(who, pruning_algorithm, _AMC_ALGOS, pruning_params)
        ddpg = _check_keys(who, "ddpg_params", ddpg_params, _DDPG_KEYS)
        translated = search_config_list(who, model, config_list, "sparsity_cap")
        totals = [e["sparsity"] for e in translated if "sparsity" in e and not e.get("exclude")]
        if not totals:
            raise PruningConfigError(f"{who} config_list needs 'total_sparsity', the share of FLOPs to remove, e.g. "
                                     "[{'op_types': ['Conv2d'], 'total_sparsity': 0.5, "
                                     "'max_sparsity_per_layer': 0.8}].")
        for entry in translated:  # the engine's sparsity is a layer's cap
            entry.pop("sparsity", None)
            if "sparsity_cap" in entry:
                entry["sparsity"] = entry.pop("sparsity_cap")
        caps = [e["sparsity"] for e in translated if "sparsity" in e]
        lbound = min(0.2, 1.0 - max(caps)) if caps else 0.2
        self.engine = AMCEngine(model, translated, evaluator, flops_ratio=1.0 - float(totals[0]),
                                 train_episode=total_episode, base_algo=algo, dummy_input=dummy_input,
                                 lbound=max(lbound, 1e-3), **ddpg)
