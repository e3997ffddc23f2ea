"""Proposers: the name an experiment file gives, the Optuna sampler (and pruner) it becomes, and its own fields.

``random`` -> ``RandomSampler``; ``sequence``/``grid`` -> ``GridSampler``; ``tpe`` -> ``TPESampler``;
``cmaes`` -> ``CmaEsSampler``; ``nsga2`` -> ``NSGAIISampler``; and the ones with fields of their own
(Auptimizer's spellings, at the top level of the file; names are read case-insensitively, as Auptimizer does):

* ``hyperopt``: ``TPESampler`` (Hyperopt's Tree of Parzen Estimators); ``engine`` ``tpe`` (default) or
  ``random`` (Hyperopt's ``rand.suggest``: ``RandomSampler``).

* ``hyperband``: Optuna's ``HyperbandPruner`` over a sampler. ``max_iter`` (default 81) is the most steps a
  trial reports, ``eta`` (3) the reduction factor, ``engine`` (``random``; or ``tpe``) the sampler;
  ``skip_last`` is accepted (Auptimizer skips each bracket's last round; Optuna's pruner has no such option).
* ``bohb``: ``HyperbandPruner`` over a TPE sampler (BOHB = Bayesian optimisation + Hyperband).
  ``min_budget``/``max_budget`` (0.01/1; whole numbers >= 1 are step counts, fractions of the run leave the
  range to the first finished trial), ``eta`` (3), ``n_iterations`` (4 Hyperband iterations: the number of
  trials when ``n_samples`` is absent), ``min_points_in_model`` (TPE's startup trials), ``top_n_percent``
  (15: TPE's share of good trials), ``num_samples`` (64: TPE's expected-improvement candidates);
  ``random_fraction``, ``bandwidth_factor``, ``min_bandwidth`` are accepted (TPE has no such knobs).
* ``spearmint``: Gaussian-process Bayesian optimisation, Optuna's ``GPSampler``. ``engine``
  (``GPEIOptChooser``, the GP expected-improvement choosers), ``grid_size`` (candidates; Optuna optimises the
  acquisition itself), ``engine_config`` and ``spearmint_dir`` (the study lives in the experiment folder) are
  accepted.

Refused, with the closest working name: ``eas`` (efficient architecture search by network transformation is not
built; search architectures with the MMRazor face's one-shot NAS, or widths/depths as ``int`` hyperparameters
with ``tpe``) and ``passive`` (a resource, not a proposer: ``"resource": "passive"`` waits for ``slimkit worker``
processes started by hand; ``sequence`` for a fixed list).

A multi-fidelity proposer (hyperband, bohb) needs the script to report intermediate values —
``slimkit.print_result(accuracy, step=epoch)`` — which the runner hands to Optuna; a trial the pruner stops
ends as ``pruned``. Each job's config carries ``n_iterations`` (the most steps a trial may run).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from slimkit.errors import ConfigError
from slimkit.experiment.space import bounded, one_of, ranked

#: proposer name -> Optuna sampler it becomes
PROPOSERS = {"random": "RandomSampler", "sequence": "GridSampler", "grid": "GridSampler", "tpe": "TPESampler",
             "hyperopt": "TPESampler", "cmaes": "CmaEsSampler", "nsga2": "NSGAIISampler",
             "hyperband": "HyperbandPruner", "bohb": "TPESampler + HyperbandPruner", "spearmint": "GPSampler"}
#: Auptimizer's proposers slimkit does not build -> why, and the closest working proposer
REFUSED = {"eas": ("efficient architecture search (EAS, network transformations driven by a reinforcement-learning "
                   "meta-controller) is not built in slimkit", "tpe"),
           "passive": ("'passive' is a resource, not a proposer: \"resource\": \"passive\" with a shared --storage "
                       "waits for `slimkit worker` processes started by hand", "sequence")}
#: proposers whose pruner stops trials from the intermediate values the script reports
MULTI_FIDELITY = ("hyperband", "bohb")
SPEARMINT_ENGINES = ("GPEIOptChooser", "GPEIChooser", "GPEIperSecChooser", "GPConstrainedEIChooser")
#: each proposer's own fields: name -> (default, rule); a rule is the allowed values, or ``(low, whole, high)`` of a
#: number (None: the field is checked by :func:`parse_proposer_options` itself)
PROPOSER_FIELDS: dict[str, dict[str, tuple[Any, Any]]] = {
    "hyperband": {"max_iter": (81, (1, True, None)), "eta": (3, (2, True, None)), "skip_last": (0, (0, True, 1)),
                  "engine": ("random", ("random", "tpe", "hyperopt"))},
    "hyperopt": {"engine": ("tpe", ("tpe", "random"))},
    "bohb": {"min_budget": (0.01, (1e-9, False, None)), "max_budget": (1, (1e-9, False, None)),
             "eta": (3, (2, True, None)), "n_iterations": (4, (1, True, None)),
             "min_points_in_model": (None, (1, True, None)), "top_n_percent": (15, (1, True, 99)),
             "num_samples": (64, (1, True, None)), "random_fraction": (1 / 3, (0, False, 1)),
             "bandwidth_factor": (3, (0, False, None)), "min_bandwidth": (0.001, (0, False, None))},
    "spearmint": {"engine": ("GPEIOptChooser", SPEARMINT_ENGINES), "grid_size": (20000, (1, True, None)),
                  "engine_config": ({}, None), "spearmint_dir": (None, None)},
}
ALL_FIELDS = tuple(sorted({k for fields in PROPOSER_FIELDS.values() for k in fields}))


def _number(raw: Mapping[str, Any], key: str, default: Any, low: float, integer: bool = False,
            high: float | None = None) -> Any:
    value = raw.get(key, default)
    if value is None or (value == "" and default is None):  # Auptimizer's files write "" for "not set"
        return None
    return bounded(value, key, low, high, integer=integer)


def parse_proposer_options(raw: Mapping[str, Any], proposer: str) -> dict[str, Any]:
    """Validate the proposer's own fields (and refuse another proposer's); return them with defaults filled in."""
    own = PROPOSER_FIELDS.get(proposer, {})
    for key in ALL_FIELDS:
        if key in raw and key not in own:
            owners = [p for p, fields in PROPOSER_FIELDS.items() if key in fields]
            raise ConfigError(f"{key}: belongs to the {' / '.join(owners)} proposer, but this experiment's proposer is "
                              f"{proposer!r}; remove it or set \"proposer\": {owners[0]!r}.")
    options = {}
    for key, (default, rule) in own.items():
        if rule is None:
            options[key] = raw.get(key, default)
        elif isinstance(rule[0], str):
            options[key] = one_of(raw.get(key, default), key, rule)
        else:
            options[key] = _number(raw, key, default, *rule)
    if proposer == "bohb" and options["min_budget"] > options["max_budget"]:
        raise ConfigError(f"min_budget: {options['min_budget']!r} exceeds max_budget {options['max_budget']!r}.")
    if proposer == "spearmint":
        if not isinstance(options["engine_config"], Mapping):
            raise ConfigError(f"engine_config: an object of chooser settings; got {options['engine_config']!r}.")
        options["engine_config"] = dict(options["engine_config"])
        if options["spearmint_dir"] is not None and not isinstance(options["spearmint_dir"], str):
            raise ConfigError(f"spearmint_dir: a folder name; got {options['spearmint_dir']!r}.")
    return options


def check_proposer(raw: Mapping[str, Any], n_objectives: int) -> str:
    """The file's ``proposer`` (default ``nsga2`` for several objectives, else ``tpe``), checked."""
    default = "nsga2" if n_objectives > 1 else "tpe"
    proposer = raw.get("proposer", default)
    if isinstance(proposer, str):
        proposer = proposer.lower()
        if proposer in REFUSED:
            why, closest = REFUSED[proposer]
            raise ConfigError(f"proposer: {proposer!r} is not available: {why}. The closest working proposer is "
                              f"{closest!r} (all: {', '.join(PROPOSERS)}).")
    if not isinstance(proposer, str) or proposer not in PROPOSERS:
        raise ConfigError(f"proposer: {proposer!r} is not available. Valid proposers (closest first): "
                          f"{', '.join(ranked(str(proposer), tuple(PROPOSERS)))}.")
    if n_objectives > 1 and proposer in ("cmaes", "spearmint", *MULTI_FIDELITY):
        raise ConfigError(f"proposer: {proposer!r} optimises one objective but {n_objectives} are given; use "
                          "'nsga2', 'tpe' or 'random' for several.")
    return proposer


def default_n_samples(proposer: str, options: Mapping[str, Any]) -> int | None:
    """Trials Auptimizer runs for ``hyperband`` / ``bohb`` when the file gives no ``n_samples``."""
    eta = options.get("eta", 3)
    if proposer == "hyperband":
        s_max = int(math.log(options["max_iter"]) / math.log(eta) + 1e-9)
        budget = (s_max + 1) * options["max_iter"]
        return sum(math.ceil(budget / options["max_iter"] / (s + 1) * eta ** s) for s in range(s_max + 1))
    if proposer == "bohb":
        rungs = -int(math.log(options["min_budget"] / options["max_budget"]) / math.log(eta)) + 1
        total = 0
        for i in range(options["n_iterations"]):
            s = rungs - 1 - (i % rungs)
            first = int(math.floor(rungs / (s + 1)) * eta ** s)
            total += sum(max(int(first * eta ** (-j)), 1) for j in range(s + 1))
        return total
    return None


def budget(proposer: str, options: Mapping[str, Any]) -> Any:
    """The ``n_iterations`` a job of a multi-fidelity proposer may run (``None`` for the others)."""
    if proposer == "hyperband":
        return options["max_iter"]
    if proposer == "bohb":
        return options["max_budget"]
    return None
