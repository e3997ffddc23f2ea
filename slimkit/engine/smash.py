"""smash(): prepare a SmashConfig for a model (:mod:`slimkit.engine.prepare`), then apply its algorithms in order."""

from __future__ import annotations

import copy
import time
from typing import Any

from slimkit.config.smash_config import SmashConfig
from slimkit.core import registry
from slimkit.core.contract import SaveFn
from slimkit.engine.base_model import describe_base
from slimkit.engine.prepare import Prepared, prepare
from slimkit.engine.smashed_model import SmashedModel
from slimkit.engine.teacher import TEACHER_KEY, load_teacher, takes_teacher
from slimkit.errors import ConfigError


def check_config(model: Any, smash_config: SmashConfig, experimental: bool = False) -> list[str]:
    """Run every pre-smash check (:func:`~slimkit.engine.prepare.prepare`) and return the algorithms to apply.

    ``smash_config`` is not changed: the device and components a smash resolves live in the prepared copy.
    """
    return list(prepare(model, smash_config, experimental=experimental).algorithms)


def smash(
    model: Any,
    smash_config: SmashConfig,
    *,
    experimental: bool = False,
    verbose: bool = True,
    copy_model: bool = True,
) -> SmashedModel:
    """Apply the SmashConfig's algorithms to ``model`` in stage order and return a :class:`SmashedModel`.

    The input model is deep-copied first (``copy_model=False`` smashes in place to save memory), so it stays
    usable as the baseline for ``slimkit.evaluation.compare``. An algorithm that declares
    ``uses_original_model = True`` (e.g. a recoverer distilling from the model as it was) reads that model as
    ``smash_config.original_model`` on its config view: the caller's own object when it was copied (no extra
    copy), else one copy taken before anything is applied; other algorithms see no such attribute. An
    algorithm with a ``teacher_ckpt`` hyperparameter set to a folder gets that model as ``smash_config.teacher``
    (loaded before anything is applied, see :mod:`slimkit.engine.teacher`), else ``smash_config.teacher`` is None.
    ``smash_config`` itself is not changed: the SmashedModel holds the resolved copy its save records (the device
    that ran included).
    """
    return smash_prepared(model, prepare(model, smash_config, experimental=experimental), verbose=verbose,
                          copy_model=copy_model)


def smash_prepared(model: Any, prepared: Prepared, *, verbose: bool = True, copy_model: bool = True) -> SmashedModel:
    """Apply a :class:`Prepared` (bound to ``model``) in stage order; the SmashedModel holds its resolved config."""
    if not prepared.bound:
        raise ConfigError("smash_prepared() needs a Prepared bound to the model: prepared.bind(model).")
    names, smash_config = list(prepared.algorithms), prepared.config
    base_spec = describe_base(model)
    wants_original = any(getattr(registry.get(n), "uses_original_model", False) for n in names)
    original = None
    if wants_original:
        try:
            original = model if copy_model else copy.deepcopy(model)
        except Exception as exc:
            raise ConfigError(f"Could not copy the model to keep it as the original ({exc}); pass copy_model=True "
                              "or drop the algorithm that distils from the original model.") from exc
    if copy_model:
        try:
            model = copy.deepcopy(model)
        except Exception as exc:
            raise ConfigError(f"Could not copy the model ({exc}); pass copy_model=False to smash it in place.") from exc
    teachers = {}
    for name in (n for n in names if takes_teacher(n)):
        path = smash_config.get_prefix_wrapper(name)[TEACHER_KEY]
        teachers[name] = load_teacher(path, f"{name}_{TEACHER_KEY}", smash_config.device) if path else None
    model = model.to(smash_config.device)
    applied: list[dict[str, Any]] = []
    pre_apply, saved_before = None, None
    for i, name in enumerate(names):
        algo = registry.get(name)()
        wrapper = smash_config.get_prefix_wrapper(name)
        if getattr(algo, "uses_original_model", False):
            wrapper.original_model = original
        if name in teachers:
            wrapper.teacher = teachers[name]
        if algo.save_fn == SaveFn.SAVE_BEFORE_APPLY and saved_before is None:
            pre_apply, saved_before = model, i
        start, cpu_start = time.perf_counter(), time.process_time()
        if verbose:
            print(f"slimkit: [{i + 1}/{len(names)}] {algo.group} {name} ...", flush=True)
        model = algo.apply(model, wrapper)
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        if verbose:
            print(f"slimkit: [{i + 1}/{len(names)}] {algo.group} {name} done in {seconds:.2f} s", flush=True)
        applied.append({"name": name, "group": algo.group, "save_fn": algo.save_fn.value,
                        "state": wrapper.state, "seconds": round(seconds, 3),
                        "cpu_seconds": round(cpu_seconds, 3)})
    return SmashedModel(model, smash_config, applied, base_spec, pre_apply, saved_before)
