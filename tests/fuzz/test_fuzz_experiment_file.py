"""Experiment files (``slimkit run experiment.json``): any shape of JSON or YAML, any field value.

A case passes when ``load_experiment`` returns a validated Experiment or raises a ConfigError naming the field
at fault. Files are written to a folder that also holds a script, so the script form can validate in full.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from slimkit.experiment.compressors import available_compressors
from slimkit.experiment.early_stop import POLICIES
from slimkit.experiment.experiment_file import FIELDS, Experiment, load_experiment
from slimkit.experiment.objectives import OBJECTIVES
from slimkit.experiment.proposers import PROPOSERS
from tests.fuzz._fuzz import clear_or_ok, examples
from tests.fuzz.test_fuzz_config_list import config_lists
from tests.fuzz.test_fuzz_smash_config import hyperparameter_maps, json_values, keys, likely_values

ranges = st.one_of(st.fixed_dictionaries({"range": st.lists(st.one_of(st.floats(-1, 2), st.integers(-2, 9)),
                                                            max_size=3),
                                          "type": st.sampled_from(["float", "int", "choice", "bool", "x"])},
                                         optional={"interval": st.one_of(st.floats(-1, 1), json_values),
                                                   "n": st.integers(-1, 5), "log": st.booleans()}),
                   st.lists(st.one_of(st.none(), st.sampled_from(["l1_filter", "int8_dynamic", "rtn"]),
                                      likely_values), max_size=3))


@st.composite
def valid_searches(draw: st.DrawFn) -> dict:
    """A search block slimkit should accept: real algorithms per group and their hyperparameters' defaults/ranges."""
    from slimkit.core import registry

    block: dict = {}
    for group in draw(st.lists(st.sampled_from(["pruner", "quantizer", "compiler"]), min_size=1, max_size=2,
                               unique=True)):
        names = draw(st.lists(st.sampled_from(registry.by_group(group)), min_size=1, max_size=2, unique=True))
        block[group] = names if len(names) > 1 or draw(st.booleans()) else names[0]
        for hp in draw(st.lists(st.sampled_from(registry.info(names[0])["hyperparameters"]), max_size=2)):
            default = hp["default"]
            if isinstance(default, float) and not isinstance(default, bool) and draw(st.booleans()):
                block[hp["name"]] = {"range": [default / 2, default], "type": "float"}
            elif isinstance(default, int) and not isinstance(default, bool) and draw(st.booleans()):
                block[hp["name"]] = {"range": [max(0, default - 1), default + 1], "type": "int"}
            else:
                block[hp["name"]] = default
    return block


search = st.one_of(valid_searches(), valid_searches(),
                   st.dictionaries(keys, st.one_of(likely_values, ranges), max_size=4),
                   hyperparameter_maps, json_values)
near_valid_compression = st.builds(
    lambda name, cl: {"framework": "torch", "compressor": name, "config_list": cl},
    st.sampled_from(list(available_compressors())),
    st.lists(st.fixed_dictionaries({"sparsity": st.one_of(st.floats(0.1, 0.9), st.just({"range": [0.2, 0.8],
                                                                                          "type": "float"}))},
                                   optional={"op_types": st.just(["Conv2d"])}), min_size=1, max_size=2))
compression = st.one_of(near_valid_compression, near_valid_compression, st.fixed_dictionaries(
    {"compressor": st.one_of(st.sampled_from(list(available_compressors())), json_values)},
    optional={"framework": st.sampled_from(["torch", "pytorch", "tf", 3]), "type": st.sampled_from(
        ["pruning", "quantization", "nas", None]),
        "config_list": st.one_of(config_lists, st.lists(st.dictionaries(
            st.sampled_from(["sparsity", "op_types", "quant_bits"]), ranges, max_size=2), max_size=2))}),
    json_values)
hyperparameter_entries = st.one_of(
    st.fixed_dictionaries({"name": st.one_of(st.sampled_from(["x", "lr", "job_id", "1x", ""]), json_values),
                           "range": st.one_of(st.lists(st.one_of(st.floats(-1, 2), st.integers(-2, 9),
                                                                 st.sampled_from(["sgd", "adam"])), max_size=3),
                                              json_values),
                           "type": st.sampled_from(["float", "int", "choice", "bool"])},
                          optional={"interval": st.one_of(st.floats(-1, 1), json_values), "n": st.integers(-1, 5),
                                    "log": st.one_of(st.booleans(), json_values), "size": st.integers(0, 2),
                                    "step": json_values}),
    json_values)
parameter_configs = st.one_of(st.lists(hyperparameter_entries, max_size=3), json_values)
policies = st.one_of(
    st.booleans(),
    st.fixed_dictionaries({"aup_policy": st.sampled_from(["median", "bandit", "truncation", "curve_fitting", "x"])},
                          optional={"aup_policy_steps": st.one_of(st.integers(-1, 5), json_values),
                                    "warmup": st.integers(-1, 3), "bandit_factor": st.floats(-0.5, 1.5),
                                    "truncation_percentage": st.one_of(st.floats(-0.5, 1.5), json_values),
                                    "curve_fitting_max_iters": st.one_of(st.integers(-1, 50), json_values),
                                    "curve_fitting_threshold": st.floats(-1, 2),
                                    "curve_fitting_timeout": st.one_of(st.floats(-1, 60), json_values)}),
    json_values)
FIELD_VALUES = {
    "name": st.one_of(st.text(max_size=10), json_values), "script": st.sampled_from(["train.py", "missing.py", ""]),
    "resource": st.sampled_from(["cpu", "gpu", "aws", "tpu", "node", "passive"]), "workingdir": st.one_of(
        st.sampled_from([".", "..", "nope", "train.py", "\x00"]), json_values),
    "n_parallel": st.one_of(st.integers(-1, 4), json_values), "n_samples": st.one_of(st.integers(-1, 4), json_values),
    "target": st.sampled_from(["min", "max", "MAX", 1]),
    "proposer": st.one_of(st.sampled_from([*PROPOSERS, "eas", "passive", "BOHB", "Random"]), json_values),
    "random_seed": st.one_of(st.integers(-1, 2**64), json_values),
    "job_failure": st.one_of(st.fixed_dictionaries({}, optional={"ignore_fail": st.one_of(st.booleans(), json_values),
                                                                 "job_retries": st.integers(-1, 3)}), json_values),
    "resource_args": st.one_of(st.dictionaries(st.sampled_from(["save_model", "early_stop",
                                                                "track_intermediate_results", "x"]),
                                               st.one_of(st.booleans(), json_values), max_size=3),
                               st.fixed_dictionaries({}, optional={
                                   "early_stop": policies, "multi_res_labels": st.one_of(
                                       st.lists(st.sampled_from(["flops", "params", ""]), max_size=3), json_values),
                                   "track_intermediate_results": st.one_of(st.booleans(), json_values)}),
                               st.fixed_dictionaries({}, optional={  # Auptimizer's node / aws settings
                                   "max_retries": st.one_of(st.integers(-1, 3), json_values),
                                   "reconn_wait_time": st.one_of(st.floats(-1, 5), json_values),
                                   "async_run": st.one_of(st.booleans(), json_values),
                                   "async_reconnect": st.one_of(st.floats(-1, 5), json_values),
                                   "async_timeout": st.one_of(st.floats(-1, 100), json_values),
                                   "shutdown": st.one_of(st.booleans(), json_values),
                                   "connection_retry": st.one_of(st.integers(-1, 3), json_values)}),
                               json_values),
    "parameter_config": parameter_configs,
    "engine": st.one_of(st.sampled_from(["tpe", "random", "GPEIChooser", "anneal"]), json_values),
    "runtime_args": st.one_of(json_values, st.fixed_dictionaries({}, optional={
        "prescript": st.one_of(st.sampled_from(["export A=1", "cd ~;", ""]), json_values),
        "postscript": st.one_of(st.sampled_from(["echo done", ";echo done"]), json_values),
        "env": st.one_of(st.dictionaries(st.sampled_from(["A", "", "B=C", "CUDA_VISIBLE_DEVICES"]),
                                         st.one_of(st.text(max_size=4), json_values), max_size=2), json_values),
        "overwrite": st.one_of(st.booleans(), json_values), "seconds": json_values})),
    "compression": compression, "expand_op_names": st.one_of(st.booleans(), json_values),
    "job_timeout": st.one_of(st.floats(allow_nan=True), st.integers(-1, 10), json_values),
    "model": st.one_of(st.sampled_from(["mlp", "digits_cnn", "os:system", "no_such_model"]), json_values),
    "data": st.one_of(st.sampled_from(["Digits", "PyDocText"]), json_values), "search": search,
    "objectives": st.one_of(st.dictionaries(st.sampled_from([*OBJECTIVES, "speed"]),
                                            st.sampled_from(["min", "max", "up"]), max_size=3),
                            st.lists(st.sampled_from([*OBJECTIVES, "speed"]), max_size=3), json_values),
}
experiments = st.one_of(
    st.fixed_dictionaries({}, optional=FIELD_VALUES),
    st.fixed_dictionaries({"script": st.just("train.py"), "compression": compression},
                          optional={k: v for k, v in FIELD_VALUES.items() if k not in ("script", "compression")}),
    st.fixed_dictionaries({"script": st.just("train.py"), "parameter_config": parameter_configs},
                          optional={k: v for k, v in FIELD_VALUES.items() if k not in ("script", "parameter_config",
                                                                                       "model", "search")}),
    st.fixed_dictionaries({"model": st.just("mlp"), "search": search},
                          optional={k: v for k, v in FIELD_VALUES.items() if k not in ("model", "search", "script",
                                                                                       "compression",
                                                                                       "parameter_config")}),
    st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=8)), json_values, max_size=4),
    json_values,
)
WORDS = (*FIELDS, "experiment", "JSON", "YAML", "object", "field", "parameter_config", "early_stop", "aup_policy",
         "resource_args", "runtime_args")


def _check(exp: object) -> None:
    if isinstance(exp, Experiment):
        assert exp.n_samples >= 1 and exp.n_parallel >= 1 and exp.job_timeout > 0
        assert (exp.script is None) != (exp.model is None)
        assert len(exp.directions) == len(exp.objective_names)
        assert len(exp.hyperparameters) == len(set(exp.hyperparameters))
        assert exp.early_stop == (exp.early_stop_policy is not None)
        if exp.early_stop_policy is not None:
            assert exp.track_intermediate_results and exp.early_stop_policy["aup_policy"] in POLICIES
        spec = exp.resources
        assert spec.kind == exp.resource and spec.shared == (exp.resource in ("node", "passive", "aws"))
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in spec.env.items())
        assert spec.connect_retries is None or spec.connect_retries >= 0
        assert spec.command(["python", "job.py"])[-2:] == ["python", "job.py"]


@examples(300)
@given(experiments, st.booleans())
def test_experiment_dict_any_shape(raw, automatic):
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "train.py").write_text("print('hi')\n")
        file = Path(folder) / "experiment.json"
        file.write_text(json.dumps(raw))
        _check(clear_or_ok("experiment_file", lambda: load_experiment(file, automatic=automatic), *WORDS))


@examples(250)
@given(st.one_of(experiments.map(lambda e: json.dumps(e).encode()), st.binary(max_size=40),
                 experiments.map(lambda e: json.dumps(e).encode()[:-3])),
       st.sampled_from(["experiment.json", "experiment.yaml", "experiment.yml", "experiment"]), st.booleans())
def test_experiment_file_any_bytes(content, filename, automatic):
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "train.py").write_text("print('hi')\n")
        file = Path(folder) / filename
        file.write_bytes(content)
        _check(clear_or_ok("experiment_file", lambda: load_experiment(file, automatic=automatic), *WORDS,
                           filename))
