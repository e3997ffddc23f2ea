"""smash(): validate a SmashConfig against a model, then apply its algorithms in stage order."""

from __future__ import annotations

import copy
import logging
import time
from typing import Any

import torch

from slimkit.config.smash_config import SmashConfig
from slimkit.core import registry
from slimkit.core.contract import SaveFn
from slimkit.engine.base_model import describe_base
from slimkit.engine.smashed_model import SmashedModel
from slimkit.engine.teacher import TEACHER_KEY, load_teacher, takes_teacher
from slimkit.errors import ConfigError, MissingComponentError, MissingPackageError, ModelNotSupportedError

logger = logging.getLogger(__name__)


def check_config(model: Any, smash_config: SmashConfig, experimental: bool = False) -> list[str]:
    """Run every pre-smash check in order and return the algorithms to apply; raise a clear error on the first failure.

    Order: unknown algorithm, device, required components, incompatible combination, model refused, missing package.
    """
    if not isinstance(smash_config, SmashConfig):
        raise ConfigError(
            f"smash() needs a SmashConfig, got {type(smash_config).__name__}; build one with SmashConfig()."
        )
    names = smash_config.get_active_algorithms()
    classes = {n: registry.get(n) for n in names}  # unknown names raise with the valid list
    device = smash_config.device
    cpu_only = sorted(n for n, cls in classes.items() if not cls.run_on_cuda)
    if smash_config.device_auto and device.startswith("cuda") and cpu_only:
        logger.info("device 'auto': running on the CPU because %s run(s) on the CPU only", ", ".join(cpu_only))
        smash_config.device = "cpu"
        smash_config.device_auto = True
        device = "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("SmashConfig device is 'cuda' but no CUDA GPU is available; set cfg.device = 'cpu'.")
    for n, cls in classes.items():
        kind = "cuda" if device.startswith("cuda") else "cpu"
        if kind == "cpu" and not cls.run_on_cpu or kind == "cuda" and not cls.run_on_cuda:
            other = "cuda" if kind == "cpu" else "cpu"
            raise ConfigError(
                f"{n} does not run on {device}. It runs on {other} only; set cfg.device = {other!r} or pick another "
                f"{cls.group} (`slimkit algorithms` lists devices)."
            )
    for n, cls in classes.items():
        for component, needed in (("tokenizer", cls.tokenizer_required), ("processor", cls.processor_required),
                                  ("data", cls.dataset_required)):
            if needed and getattr(smash_config, component) is None:
                fix = {"tokenizer": "a tokenizer; add one with cfg.add_tokenizer(...)",
                       "processor": "a processor; add one with cfg.add_processor(...)",
                       "data": "a dataset; add one with cfg.add_data(...)"}[component]
                raise MissingComponentError(f"{n} needs {fix} before smash().")
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            ok, why = registry.compatible(a, b)
            if not ok:
                raise ConfigError(f"{a} and {b} cannot be combined: {why}. Remove one of them from the SmashConfig.")
    for n, cls in classes.items():
        algo = cls()
        if not experimental and not algo.model_check_fn(model):
            raise ModelNotSupportedError(
                f"{n} does not support this model ({type(model).__name__}). {algo.model_check_reason()} "
                "Pass experimental=True to smash() to try anyway."
            )
    for n, cls in classes.items():
        try:
            cls().import_algorithm_packages()
        except ImportError as exc:
            extra = f"pip install 'slimkit[{cls.extra}]'" if cls.extra else f"pip install {exc.name or 'the package'}"
            raise MissingPackageError(
                f"{n} needs a package that is not installed ({exc}). Install it: {extra}"
            ) from exc
    return names


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
    """
    if isinstance(model, SmashedModel):
        raise ConfigError("This model is already smashed; smash the original model with a SmashConfig that holds "
                          "every algorithm you want.")
    if not isinstance(model, torch.nn.Module):
        raise ModelNotSupportedError(f"smash() needs a torch.nn.Module, got {type(model).__name__}.")
    names = check_config(model, smash_config, experimental)
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
