"""The experiment file (JSON, or YAML with PyYAML): Auptimizer's fields plus slimkit's script-free form.

Script form (Auptimizer)::

    {"name": "digits l1", "script": "train.py", "resource": "cpu", "n_samples": 8, "n_parallel": 2,
     "target": "max", "proposer": "tpe", "random_seed": 0,
     "compression": {"framework": "torch", "type": "pruning", "compressor": "l1_filter",
                     "config_list": [{"sparsity": {"range": [0.2, 0.8], "type": "float"}, "op_types": ["Conv2d"]}]}}

A script's ``parameter_config`` (training hyperparameters, :mod:`slimkit.experiment.hyperparameters`; always a
search) may stand alone or beside ``compression`` ranges; early stopping: :mod:`slimkit.experiment.early_stop`.

Script-free form: ``"model"`` (a zoo name, a Hugging Face folder or ``package.module:factory``), ``"search"``
(SmashConfig keys with choices/ranges) and ``"objectives"`` (``{"accuracy": "max", "latency": "min"}``)
measured by slimkit itself. Every error names the field's path and what is allowed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slimkit.errors import ConfigError
from slimkit.experiment.compressors import KINDS, check_config_list_keys, get_compressor_spec
from slimkit.experiment.early_stop import parse_early_stop
from slimkit.experiment.files import read_mapping
from slimkit.experiment.hyperparameters import check_clashes, parameter_config_params
from slimkit.experiment.objectives import TARGETS, measured_objectives, multi_res_labels, script_objectives
from slimkit.experiment.proposers import (
    ALL_FIELDS,
    MULTI_FIDELITY,
    check_proposer,
    default_n_samples,
    parse_proposer_options,
)
from slimkit.experiment.resources import NODE_FIELDS, Resource, check_resource_kind, parse_resource
from slimkit.experiment.smash_space import SmashSpace, parse_search
from slimkit.experiment.space import Param, bounded, config_list_params, one_of, ranked

FIELDS = ("name", "script", "resource", "workingdir", "n_parallel", "n_samples", "target", "proposer",
          "random_seed", "job_failure", "resource_args", "runtime_args", "compression", "expand_op_names",
          "job_timeout", "model", "data", "search", "objectives", "storage", "parameter_config", *ALL_FIELDS)
COMPRESSION_FIELDS = ("framework", "type", "compressor", "config_list")
JOB_FAILURE_FIELDS = ("ignore_fail", "job_retries")
RESOURCE_ARGS_FIELDS = ("save_model", "early_stop", "track_intermediate_results", "multi_res_labels", *NODE_FIELDS,
                        "shutdown", "connection_retry")


@dataclass
class Experiment:
    """A validated experiment: every field with its default, the search parameters and where it writes."""

    name: str
    path: Path | None
    workingdir: Path
    script: Path | None = None
    resource: str = "cpu"
    #: the resource's remote-machine settings and the shell around each job (:mod:`slimkit.experiment.resources`)
    resources: Resource = field(default_factory=Resource)
    n_parallel: int = 1
    n_samples: int = 1
    target: str = "max"
    proposer: str = "tpe"
    #: the proposer's own fields with defaults (hyperband's max_iter, bohb's budgets, spearmint's engine...)
    proposer_options: dict[str, Any] = field(default_factory=dict)
    random_seed: int | None = None
    ignore_fail: bool = True
    job_retries: int = 0
    save_model: bool = False
    early_stop: bool = False
    #: the checked ``early_stop`` policy (:mod:`slimkit.experiment.early_stop`), None without early stopping
    early_stop_policy: dict[str, Any] | None = None
    #: names of the extra values a script reports after its metric (``print_result([metric, *extras])``)
    multi_res_labels: list[str] = field(default_factory=list)
    #: the ``parameter_config`` names: each trial's value sits at the top of the job config
    hyperparameters: list[str] = field(default_factory=list)
    track_intermediate_results: bool = False
    runtime_args: dict[str, Any] = field(default_factory=dict)
    job_timeout: float = 3600.0
    compression: dict[str, Any] | None = None
    expand_op_names: bool = True
    model: str | None = None
    data: str | None = None
    smash_space: SmashSpace | None = None
    objectives: dict[str, str] = field(default_factory=dict)
    storage: str | None = None
    params: list[Param] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def directions(self) -> list[str]:
        """Optuna directions: ``minimize``/``maximize`` per objective (the script's one metric in script mode)."""
        goals = list(self.objectives.values()) if self.objectives else [self.target]
        return ["maximize" if g == "max" else "minimize" for g in goals]

    @property
    def objective_names(self) -> list[str]:
        """Names of the measured values (``["result"]`` for a script)."""
        return list(self.objectives) or ["result"]

    def default_folder(self) -> Path:
        """Where the runner writes: ``<workingdir>/runs/<name as a folder name>``."""
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", self.name).strip("_") or "experiment"
        return self.workingdir / "runs" / slug


def _unknown(key: Any, allowed: tuple[str, ...], where: str) -> ConfigError:
    return ConfigError(f"{where}{key!r} is not a field. Valid fields (closest first): "
                       f"{', '.join(ranked(str(key), allowed))}.")


def _int(raw: Mapping[str, Any], key: str, path: str, default: int | None, minimum: int) -> int | None:
    value = raw.get(key, default)
    return None if value is None and default is None else bounded(value, path, minimum, integer=True)


def _bool(raw: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{path}: must be true or false; got {value!r}.")
    return value


def _section(raw: Mapping[str, Any], key: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: must be an object with {', '.join(allowed)}; got {value!r}.")
    for sub in value:
        if sub not in allowed:
            raise _unknown(sub, allowed, f"{key}: ")
    return dict(value)


def _compression(raw: Mapping[str, Any], expand: bool) -> tuple[dict[str, Any], list[Param]]:
    block = _section(raw, "compression", COMPRESSION_FIELDS)
    framework = str(block.get("framework", "torch")).lower()
    framework = {"pytorch": "torch", "tf": "tensorflow", "keras": "tensorflow"}.get(framework, framework)
    if framework not in ("torch", "tensorflow"):  # a TensorFlow script runs; its create_compressor call refuses
        raise ConfigError(f"compression.framework: {block.get('framework')!r} is not supported; slimkit compresses "
                          "PyTorch models, use 'torch'.")
    kind = block.get("type")
    if kind is not None and kind not in KINDS:
        raise ConfigError(f"compression.type: {kind!r} is not allowed; use one of {', '.join(KINDS)}.")
    if "compressor" not in block:
        raise ConfigError("compression.compressor: missing; name one, e.g. 'l1_filter' (`slimkit algorithms`).")
    try:
        spec = get_compressor_spec(block["compressor"], kind)
    except ConfigError as exc:
        raise ConfigError(f"compression.compressor: {exc}") from None
    if "config_list" not in block:
        raise ConfigError("compression.config_list: missing; add e.g. [{'sparsity': 0.5, 'op_types': ['Conv2d']}].")
    check_config_list_keys(spec, block["config_list"])
    default = getattr(spec.engine, "default_config_list", None)  # e.g. naive: [] means 8-bit Conv/Linear weights
    params = [] if block["config_list"] == [] and default else config_list_params(block["config_list"], expand)
    return {**block, "type": spec.kind, "framework": framework}, params


def load_experiment(source: str | os.PathLike | Mapping[str, Any], automatic: bool = False) -> Experiment:
    """Read and validate an experiment file (or dict); ``automatic`` allows (and needs) search ranges.

    A file with ``parameter_config`` (Auptimizer's hyperparameter search) is always a search.
    """
    path = None if isinstance(source, Mapping) else Path(source)
    raw = dict(source) if isinstance(source, Mapping) else read_mapping(path, "experiment")
    automatic = automatic or "parameter_config" in raw
    for key in raw:
        if key not in FIELDS:
            raise _unknown(key, FIELDS, "")
    name = raw.get("name", path.stem if path else "experiment")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"name: must be a non-empty string; got {name!r}.")
    base = path.resolve().parent if path else Path.cwd()
    workingdir = raw.get("workingdir", str(base))
    if not isinstance(workingdir, str) or not (base / workingdir).is_dir():
        raise ConfigError(f"workingdir: {workingdir!r} is not an existing folder (paths are relative to the "
                          f"experiment file's folder {base}).")
    exp = Experiment(name=name, path=path, workingdir=(base / workingdir).resolve(), raw=raw)
    exp.resource = check_resource_kind(raw.get("resource", "cpu"))
    exp.n_parallel = _int(raw, "n_parallel", "n_parallel", 1, 1)
    exp.n_samples = _int(raw, "n_samples", "n_samples", 1, 1)
    exp.random_seed = _int(raw, "random_seed", "random_seed", None, 0)
    target = raw.get("target", "max")
    exp.target = target if target is None else one_of(target, "target", TARGETS)
    failure = _section(raw, "job_failure", JOB_FAILURE_FIELDS)
    exp.ignore_fail = _bool(failure, "ignore_fail", "job_failure.ignore_fail", True)
    exp.job_retries = _int(failure, "job_retries", "job_failure.job_retries", 0, 0)
    args = _section(raw, "resource_args", RESOURCE_ARGS_FIELDS)
    exp.save_model = _bool(args, "save_model", "resource_args.save_model", False)
    exp.early_stop_policy = parse_early_stop(args.get("early_stop"))
    exp.early_stop = exp.early_stop_policy is not None
    # as in Auptimizer, early stopping tracks the intermediate results whatever track_intermediate_results says
    exp.track_intermediate_results = exp.early_stop or _bool(args, "track_intermediate_results",
                                                             "resource_args.track_intermediate_results", False)
    exp.multi_res_labels = multi_res_labels(args.get("multi_res_labels", []))
    exp.runtime_args = raw.get("runtime_args", {})
    if not isinstance(exp.runtime_args, Mapping):
        raise ConfigError(f"runtime_args: an object of extra values for the job config; got {exp.runtime_args!r}.")
    exp.resources = parse_resource(exp.resource, args, exp.runtime_args)
    timeout = raw.get("job_timeout", exp.resources.job_timeout or 3600.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ConfigError(f"job_timeout: seconds a trial may run (a number > 0); got {timeout!r}.")
    exp.job_timeout = float(timeout)
    exp.expand_op_names = _bool(raw, "expand_op_names", "expand_op_names", True)
    exp.storage = raw.get("storage")
    if exp.storage is not None and (not isinstance(exp.storage, str) or "://" not in exp.storage):
        raise ConfigError(f"storage: a database URL workers share, e.g. 'postgresql://USER@HOST:5432/DB'; got "
                          f"{exp.storage!r}. Leave it out for the journal file in the experiment folder.")
    if ("script" in raw) == ("model" in raw):
        raise ConfigError("An experiment needs exactly one of 'script' (a compression script, Auptimizer style) or "
                          "'model' (slimkit smashes and measures it itself); "
                          f"got {'both' if 'script' in raw else 'neither'}.")
    if "script" in raw:
        for key in ("search", "data"):
            if key in raw:
                raise ConfigError(f"{key}: belongs to the script-free form (with 'model'); a script experiment "
                                  "searches compression.config_list and reports its metric with print_result.")
        script = raw["script"]
        if not isinstance(script, str) or not (exp.workingdir / script).is_file():
            raise ConfigError(f"script: {script!r} is not a file in {exp.workingdir}; give the path of the "
                              "compression script (relative to workingdir).")
        exp.script = (exp.workingdir / script).resolve()
        if "compression" not in raw and "parameter_config" not in raw:
            raise ConfigError("parameter_config / compression: missing; a script experiment searches training "
                              "hyperparameters "
                              "(\"parameter_config\": [{\"name\": \"lr\", \"range\": [0.001, 0.1], \"type\": "
                              "\"float\"}]), names a compression (\"compression\": {'framework': 'torch', 'type': "
                              "'pruning', 'compressor': 'l1_filter', 'config_list': [...]}), or both.")
        if "parameter_config" in raw:
            exp.params = parameter_config_params(raw["parameter_config"])
            exp.hyperparameters = check_clashes([p.name for p in exp.params], exp.runtime_args)
        if "compression" in raw:
            exp.compression, searched = _compression(raw, exp.expand_op_names)
            exp.params += searched
        if "objectives" in raw:
            exp.objectives = script_objectives(raw["objectives"])
            if exp.multi_res_labels and len(exp.objectives) > 1:
                raise ConfigError("resource_args.multi_res_labels: names extra values beside ONE metric; with several "
                                  "objectives report them all in print_result([...]) and name them in 'objectives'.")
    else:
        if "parameter_config" in raw:
            raise ConfigError("parameter_config: needs a 'script' that trains with these values (it reads them with "
                              "BasicConfig().load(sys.argv[1])); without a script, search SmashConfig keys in "
                              "'search'.")
        if "compression" in raw:
            raise ConfigError("compression: needs a 'script' that calls create_compressor; without a script write the "
                              "search over SmashConfig keys in 'search' (e.g. {\"pruner\": \"l1_filter\", "
                              "\"l1_filter_sparsity\": 0.5}).")
        if not isinstance(raw["model"], str) or not raw["model"]:
            raise ConfigError(f"model: a zoo name, a Hugging Face folder or package.module:factory; "
                              f"got {raw['model']!r}.")
        exp.model = raw["model"]
        runner_keys = [k for k in ("prescript", "postscript", "env") if k in exp.runtime_args]
        if runner_keys:
            raise ConfigError(f"runtime_args.{runner_keys[0]}: shapes the shell a script job runs in; the script-free "
                              "form smashes in the worker process itself, so there is no job shell: remove it.")
        exp.data = raw.get("data")
        if exp.data is not None and not isinstance(exp.data, str):
            raise ConfigError(f"data: a slimkit.data id such as 'Digits' or 'PyDocText'; got {exp.data!r}.")
        exp.smash_space = parse_search(raw.get("search", {}), automatic)
        exp.params = exp.smash_space.params
        exp.objectives = measured_objectives(raw)
    exp.proposer = check_proposer(raw, len(exp.directions))
    exp.proposer_options = parse_proposer_options(raw, exp.proposer)
    if exp.proposer in MULTI_FIDELITY:  # the pruner needs the script's intermediate values
        if args.get("track_intermediate_results") is False:
            raise ConfigError(f"resource_args.track_intermediate_results: the {exp.proposer!r} proposer stops trials "
                              "from their intermediate values; leave it true (the default for this proposer).")
        exp.track_intermediate_results = True
        if "n_samples" not in raw:
            exp.n_samples = default_n_samples(exp.proposer, exp.proposer_options) or 1
    if not automatic and exp.params:
        raise ConfigError(f"{exp.params[0].path}: is a search range but this is a one-time run; add --automatic to "
                          "search it, or write one value.")
    if exp.proposer in ("grid", "sequence"):
        for param in exp.params:
            if param.grid() is None and param.name in exp.hyperparameters and exp.proposer == "sequence":
                param.step = 1  # Auptimizer's sequence proposer: "Using default interval of 1"
            if param.grid() is None:
                raise ConfigError(f"{param.path}: the {exp.proposer!r} proposer needs a grid; add \"interval\": step "
                                  "or \"n\": points to this float range.")
    return exp
