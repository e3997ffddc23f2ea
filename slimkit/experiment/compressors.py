"""The compressors an experiment may name: a view of THE registry (``slimkit.core.registry``), not a table.

``"compressor"`` in an experiment (or the name given to :func:`slimkit.create_compressor`) is any name the
registry knows: ``"l1_filter"``, the NNI class name ``"L1FilterPruner"``, a short name such as ``"apoz"``. It
resolves to the same algorithm a SmashConfig uses. The experiment ``"type"`` must be that algorithm's kind
(``pruning`` or ``quantization``). An algorithm with an NNI-face engine (``Pruner``/``Quantizer`` subclass)
is built as that engine on the user's model; one without (``rtn``, ``gptq``, ``int8_dynamic``...) runs as
its smash algorithm when the script calls ``compress()``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slimkit.core import registry
from slimkit.core.contract import SlimkitAlgorithm
from slimkit.engines.pruning import LevelEngine, Pruner
from slimkit.engines.pruning.agp import agp_engine
from slimkit.engines.pruning.config import BASE_CONFIG_KEYS
from slimkit.engines.quantization import Quantizer
from slimkit.engines.quantization.config import QUANT_CONFIG_KEYS
from slimkit.errors import AlgorithmNotFoundError, ConfigError
from slimkit.experiment.space import ranked

#: The experiment kinds a compression job may have.
KINDS: tuple[str, ...] = ("pruning", "quantization")

_UNSTRUCTURED = (
    "zeroes single weights, so no whole channel becomes empty and the speedup has nothing to remove; use a "
    "filter pruner such as 'l1_filter' (or 'agp' with pruning_algorithm='l1') to get a smaller model"
)


@dataclass(frozen=True)
class CompressorSpec:
    """One named compressor as an experiment sees it: the registry's algorithm class and its kind."""

    name: str
    kind: str
    algorithm: type[SlimkitAlgorithm]

    @property
    def engine(self) -> type | None:
        """The NNI-face engine class, or ``None`` when the algorithm runs through smash."""
        return self.algorithm.engine

    def build(self, model: Any, config_list: Any, optimizer: Any, dummy_input: Any, kwargs: Mapping[str, Any]) -> Any:
        """Construct the engine on ``model`` (the algorithm's engine defaults first, the user's kwargs win)."""
        assert self.engine is not None
        params = inspect.signature(self.engine).parameters
        options = {k: v for k, v in self.algorithm.engine_defaults.items() if k in params and k != "dependency_aware"}
        if self.algorithm.engine_defaults.get("dependency_aware") and dummy_input is not None and \
                "dependency_aware" in params:
            options["dependency_aware"] = True  # same channels as the SmashConfig face removes
        options.update(kwargs)
        if "dummy_input" in params:
            options["dummy_input"] = dummy_input
        return self.engine(model, config_list, optimizer=optimizer, **options)

    def speedup_refusal(self, kwargs: Mapping[str, Any]) -> str | None:
        """``None`` when ``apply_speedup`` can shrink what this pruner masks, else the reason it cannot."""
        if self.kind != "pruning":
            return None
        if self.name == "level":
            return f"level pruning {_UNSTRUCTURED}"
        if self.name == "agp" and issubclass(agp_engine(kwargs.get("pruning_algorithm", "level")), LevelEngine):
            return f"agp with pruning_algorithm='level' {_UNSTRUCTURED}"
        params = inspect.signature(self.engine).parameters if self.engine is not None else {}
        for key, unstructured in (("base_algo", "level"), ("granularity", "fine")):
            if key in params and kwargs.get(key, params[key].default) == unstructured:
                return f"{self.name} with {key}={unstructured!r} {_UNSTRUCTURED} (pass {key}=" + (
                    "'l1' to prune filters)" if key == "base_algo" else "'filter' to prune output channels)")
        return None


def available_compressors(kind: str | None = None) -> dict[str, str]:
    """``{name: kind}`` of every compressor (only those of ``kind`` when given), sorted by name."""
    kinds = KINDS if kind is None else (kind,)
    return dict(sorted((n, k) for k in kinds for n in registry.by_kind(k)))


def get_compressor_spec(name: Any, kind: str | None = None) -> CompressorSpec:
    """Resolve ``name`` through the registry (canonical, NNI class or short name); check it against ``kind``."""
    if kind is not None and kind not in KINDS:
        raise ConfigError(f"Compression type {kind!r} is not supported; use one of {', '.join(KINDS)}.")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"compressor must be a name such as 'l1_filter', got {name!r}. "
                          f"Valid names: {', '.join(available_compressors(kind))}.")
    try:
        cls = registry.get(name)
    except AlgorithmNotFoundError:
        valid = list(available_compressors(kind))
        raise ConfigError(f"Unknown compressor {name!r}{f' for type {kind!r}' if kind else ''}. "
                          f"Valid names (closest first): {', '.join(ranked(name, valid))}. NNI class names such "
                          "as 'L1FilterPruner' or 'QATQuantizer' work too.") from None
    if cls.kind() not in KINDS:
        raise ConfigError(f"{cls.algorithm_name!r} is a {cls.group}, which an experiment's compression block cannot "
                          f"run; compressors are of type {' or '.join(KINDS)}.")
    if kind is not None and cls.kind() != kind:
        raise ConfigError(f"Compressor {cls.algorithm_name!r} is a {cls.kind()} compressor but the experiment says "
                          f"type {kind!r}; set 'type': {cls.kind()!r} or pick a {kind} compressor: "
                          f"{', '.join(available_compressors(kind))}.")
    return CompressorSpec(cls.algorithm_name, cls.kind(), cls)


def config_list_keys(spec: CompressorSpec) -> tuple[str, ...] | None:
    """The ``config_list`` keys the compressor's engine reads (``None`` when it has no engine or does not say)."""
    engine = spec.engine
    if isinstance(engine, type) and issubclass(engine, Pruner):
        extra = tuple(getattr(engine, "extra_config_keys", ()))
        return (*BASE_CONFIG_KEYS, *extra, *(("final_sparsity",) if "start_epoch" in extra else ()), "expand_op_names")
    if isinstance(engine, type) and issubclass(engine, Quantizer):
        return (*QUANT_CONFIG_KEYS, *getattr(engine, "extra_config_keys", ()), "expand_op_names")
    return None


def check_config_list_keys(spec: CompressorSpec, config_list: Any, path: str = "compression.config_list") -> None:
    """Refuse a key the engine would not read, at validation time (not when the script runs)."""
    allowed = config_list_keys(spec)
    if allowed is None or not isinstance(config_list, list):
        return
    for index, entry in enumerate(config_list):
        for key in entry if isinstance(entry, Mapping) else ():
            if key not in allowed:
                raise ConfigError(f"{path}[{index}]: {key!r} is not a key {spec.name!r} reads; it reads "
                                  f"{', '.join(ranked(str(key), list(allowed)))} (closest first).")


def check_compressor_kwargs(spec: CompressorSpec, kwargs: Mapping[str, Any]) -> None:
    """Refuse keyword arguments the compressor does not take (listing the ones it does)."""
    if spec.engine is None:
        accepted = [hp.name for hp in spec.algorithm().get_hyperparameters()] + ["data", "tokenizer"]
    else:
        params = inspect.signature(spec.engine).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return
        fixed = {"self", "model", "config_list", "optimizer", "dummy_input"}
        accepted = [n for n, p in params.items() if n not in fixed and p.kind is not inspect.Parameter.VAR_POSITIONAL]
    for key in kwargs:
        if key not in accepted:
            raise ConfigError(f"Compressor {spec.name!r} takes no argument {key!r}. It accepts: "
                              f"{', '.join(accepted) or '(no extra arguments)'}.")


#: NNI config_list keys that name a smash hyperparameter differently.
_CONFIG_KEY_ALIASES = {"quant_bits": "bits", "sparsity_per_layer": "sparsity", "total_sparsity": "sparsity"}
_SELECTION_KEYS = ("op_types", "op_names", "op_partial_names", "exclude", "quant_types")


def config_list_hyperparameters(spec: CompressorSpec, config_list: Any) -> dict[str, Any]:
    """Hyperparameters of an engine-less algorithm read from its ``config_list``.

    Each entry's keys other than the layer selection are hyperparameter names (NNI's ``quant_bits`` means
    ``bits``); ``{"exclude": True, "op_names": [...]}`` entries fill the algorithm's ``exclude`` list when it
    has one. Selection by ``op_types``/``op_names`` is the algorithm's own (it quantizes what it supports).
    """
    hps = {hp.name for hp in spec.algorithm().get_hyperparameters()}
    found: dict[str, Any] = {}
    for entry in config_list or []:
        if not isinstance(entry, Mapping):
            raise ConfigError(f"config_list entries must be dicts, got {entry!r}.")
        if entry.get("exclude"):
            if "exclude" not in hps:
                raise ConfigError(f"{spec.name!r} has no exclude list; remove the exclude entry {dict(entry)}.")
            names = entry.get("op_names", [])
            if entry["exclude"] is not True or not isinstance(names, list) or \
                    not all(isinstance(n, str) for n in names):
                raise ConfigError(f"config_list exclude entry {dict(entry)}: write {{'exclude': True, 'op_names': "
                                  "['layer name or pattern', ...]}.")
            found["exclude"] = [*found.get("exclude", []), *names]
            continue
        for key, value in entry.items():
            if key in _SELECTION_KEYS:
                continue
            name = _CONFIG_KEY_ALIASES.get(key, key)
            if name not in hps:
                raise ConfigError(f"config_list key {key!r} means nothing to {spec.name!r}; it takes "
                                  f"{', '.join(sorted(hps)) or 'no hyperparameters'} (and op_types/op_names/exclude).")
            if isinstance(value, Mapping):  # NNI's per-type form {"weight": 4}
                if not value:
                    raise ConfigError(f"config_list key {key!r} is an empty object; write a value, or NNI's "
                                      f"per-type form {{{key!r}: {{'weight': 8}}}}.")
                value = next(iter(value.values()))
            found[name] = value
    return found
