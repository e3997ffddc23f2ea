"""The experiment file: every bad field gets an error naming its path, what was given and what is allowed."""

from __future__ import annotations

import json
import re

import pytest
import torch

from slimkit.errors import ConfigError
from slimkit.experiment import load_experiment


def _script_exp(tmp_path, **changes):
    (tmp_path / "train.py").write_text("#!/usr/bin/env python\nprint('#Auto: result=1.0')\n")
    exp = {"name": "e", "script": "train.py", "resource": "cpu", "n_samples": 2, "proposer": "random",
           "compression": {"framework": "torch", "type": "pruning", "compressor": "l1_filter",
                           "config_list": [{"sparsity": 0.5, "op_types": ["Conv2d"]},
                                           {"sparsity": {"range": [0.1, 0.9], "type": "float"},
                                            "op_names": ["conv1", "conv2"]}]}}
    for key, value in changes.items():
        if value is None:
            exp.pop(key)
        else:
            exp[key] = value
    path = tmp_path / "exp.json"
    path.write_text(json.dumps(exp))
    return path


def _free_exp(tmp_path, **changes):
    exp = {"name": "f", "model": "digits_cnn", "n_samples": 2,
           "search": {"pruner": [None, "l1_filter"], "l1_filter_sparsity": {"range": [0.2, 0.8], "type": "float"}},
           "objectives": {"accuracy": "max", "latency": "min"}}
    exp.update(changes)
    path = tmp_path / "free.json"
    path.write_text(json.dumps(exp))
    return path


def _compression(tmp_path, entry=None, **block):
    base = {"framework": "torch", "type": "pruning", "compressor": "l1_filter",
            "config_list": [{"sparsity": 0.5, "op_types": ["Conv2d"]}, entry or {"sparsity": 0.5}]}
    base.update(block)
    return _script_exp(tmp_path, compression=base)


def test_a_valid_file_loads_with_its_search_parameters(tmp_path):
    exp = load_experiment(_script_exp(tmp_path), automatic=True)
    assert exp.script == (tmp_path / "train.py").resolve() and exp.proposer == "random" and exp.n_samples == 2
    # expand_op_names defaults to true: one sparsity per op name
    assert [p.name for p in exp.params] == ["config_list[1].sparsity@conv1", "config_list[1].sparsity@conv2"]
    exp = load_experiment(_script_exp(tmp_path, expand_op_names=False), automatic=True)
    assert [p.name for p in exp.params] == ["config_list[1].sparsity"]
    free = load_experiment(_free_exp(tmp_path), automatic=True)
    assert [p.name for p in free.params] == ["pruner", "l1_filter_sparsity"]
    assert free.params[1].condition == ("pruner", "l1_filter") and free.directions == ["maximize", "minimize"]
    assert free.proposer == "nsga2"  # two objectives: the multi-objective default


def test_yaml_files_load_too(tmp_path):
    import yaml  # installed with transformers (a dependency), so never skipped
    path = _script_exp(tmp_path)
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(json.loads(path.read_text())))
    assert load_experiment(tmp_path / "exp.yaml", automatic=True).n_samples == 2


@pytest.mark.parametrize(("changes", "message"), [
    ({"n_sample": 3}, r"'n_sample' is not a field\. Valid fields \(closest first\): n_samples, "),
    ({"proposer": "tpee"}, r"proposer: 'tpee' is not available\. Valid proposers \(closest first\): tpe, "),
    ({"proposer": "hyperbnd"}, r"Valid proposers \(closest first\): hyperband, .*nsga2"),
    ({"proposer": "hyperband", "max_iter": 0}, r"max_iter: must be a whole number >= 1; got 0"),
    ({"proposer": "bohb", "min_budget": 2, "max_budget": 1}, r"min_budget: 2 exceeds max_budget 1"),
    ({"proposer": "spearmint", "engine": "GPEI"}, r"engine: 'GPEI' is not allowed; use one of \(closest first\): "
                                                 r"GPEIChooser"),
    ({"proposer": "random", "num_samples": 4}, r"num_samples: belongs to the bohb proposer, but this experiment's "
                                               r"proposer is 'random'"),
    ({"proposer": "bohb", "resource_args": {"track_intermediate_results": False}},
     r"track_intermediate_results: the 'bohb' proposer stops trials from their intermediate values"),
    ({"target": "maximize"}, r"target: 'maximize' is not allowed; use one of \(closest first\): max, min"),
    ({"resource_args": {"connection_retry": 3}}, r"resource_args\.connection_retry: belongs to the 'aws' resource"),
    ({"resource": "tpu"}, r"resource: 'tpu' is not allowed"),
    ({"n_parallel": 0}, r"n_parallel: must be a whole number >= 1; got 0"),
    ({"n_samples": "4"}, r"n_samples: must be a whole number >= 1; got '4'"),
    ({"random_seed": 1.5}, r"random_seed: must be a whole number >= 0"),
    ({"job_failure": {"job_retry": 1}}, r"job_failure: 'job_retry' is not a field\. Valid fields \(closest first\): "
                                        r"job_retries"),
    ({"job_failure": {"ignore_fail": "yes"}}, r"job_failure\.ignore_fail: must be true or false; got 'yes'"),
    ({"resource_args": {"save_models": True}}, r"resource_args: 'save_models' is not a field\. .*: save_model"),
    ({"job_timeout": 0}, r"job_timeout: seconds a trial may run \(a number > 0\); got 0"),
    ({"script": "missing.py"}, r"script: 'missing.py' is not a file in "),
    ({"model": "digits_cnn"}, r"exactly one of 'script' .* or 'model' .*; got both"),
    ({"workingdir": "nowhere"}, r"workingdir: 'nowhere' is not an existing folder"),
    ({"compression": None}, r"parameter_config / compression: missing; a script experiment searches training"),
])
def test_top_level_field_errors(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message):
        load_experiment(_script_exp(tmp_path, **changes), automatic=True)


@pytest.mark.parametrize(("entry", "block", "message"), [
    ({"sparsity": {"range": [0.1, 1.5], "type": "float"}}, {},
     r"compression\.config_list\[1\]\.sparsity\.range: sparsity must lie in \[0, 1\)"),
    ({"sparsity": {"range": [0.9, 0.1], "type": "float"}}, {},
     r"compression\.config_list\[1\]\.sparsity\.range: lo must not exceed hi; got \[0\.9, 0\.1\]"),
    ({"sparsity": {"range": [0.1, 0.9], "type": "floaat"}}, {},
     r"compression\.config_list\[1\]\.sparsity\.type: 'floaat' is not a search type; use one of float, int, "
     r"choice \(closest first: float"),
    ({"sparsity": {"range": [0.1, 0.9], "type": "float", "step": 0.1}}, {},
     r"compression\.config_list\[1\]\.sparsity: unknown key 'step' in a search range\. Allowed \(closest first\)"),
    ({"sparsity": {"range": [1, 2.5], "type": "int"}}, {}, r"\.sparsity\.range: a 'int' range is \[lo, hi\] with two "
                                                           r"whole numbers"),
    ({"sparsity": 1.2}, {}, r"compression\.config_list\[1\]\.sparsity: sparsity must lie in \[0, 1\)"),
    ({"sparsity": 0.5, "op_names": "conv1"}, {}, r"compression\.config_list\[1\]\.op_names: must be a list of names"),
    ({"sparsity": 0.5, "expand_op_names": "yes"}, {}, r"config_list\[1\]\.expand_op_names: must be true or false"),
    (None, {"compressor": "l1_filtr"}, r"compression\.compressor: Unknown compressor 'l1_filtr' for type 'pruning'\. "
                                       r"Valid names \(closest first\): l1_filter, "),
    (None, {"type": "quantization"}, r"compression\.compressor: Compressor 'l1_filter' is a pruning compressor but "
                                     r"the experiment says type 'quantization'"),
    (None, {"type": "distillation"}, r"compression\.type: 'distillation' is not allowed; use one of pruning, "
                                     r"quantization"),
    (None, {"framework": "mxnet"}, r"compression\.framework: 'mxnet' is not supported"),
    (None, {"config_lists": []}, r"compression: 'config_lists' is not a field\. .*: config_list"),
    (None, {"config_list": []}, r"compression\.config_list: must be a non-empty list of dicts"),
    ({"sparsity": 0.5, "start_epoch": 0}, {}, r"compression\.config_list\[1\]: 'start_epoch' is not a key "
                                              r"'l1_filter' reads; it reads "),
    (None, {"compressor": "agp", "config_list": [{"final_sparsity": 0.5, "end_epochs": 2}]},
     r"config_list\[0\]: 'end_epochs' is not a key 'agp' reads; it reads end_epoch, "),
])
def test_compression_block_errors_name_the_path(tmp_path, entry, block, message):
    with pytest.raises(ConfigError, match=message):
        load_experiment(_compression(tmp_path, entry, **block), automatic=True)


def test_one_time_runs_refuse_ranges_and_grids_need_points(tmp_path):
    with pytest.raises(ConfigError, match=r"compression\.config_list\[1\]\.sparsity: is a search range but this is a "
                                          r"one-time run; add --automatic"):
        load_experiment(_script_exp(tmp_path), automatic=False)
    with pytest.raises(ConfigError, match=r"config_list\[1\]\.sparsity: the 'grid' proposer needs a grid; add "
                                          r"\"interval\""):
        load_experiment(_script_exp(tmp_path, proposer="grid"), automatic=True)
    entry = {"sparsity": {"range": [0.2, 0.6], "type": "float", "interval": 0.2}, "op_names": ["conv1"]}
    exp = load_experiment(_compression(tmp_path, entry), automatic=True)
    assert exp.params[0].grid() == [0.2, 0.4, 0.6]
    entry = {"sparsity": {"range": [0.2, 0.6], "type": "float", "n": 5}}
    assert load_experiment(_compression(tmp_path, entry), automatic=True).params[0].grid() == [0.2, 0.3, 0.4, 0.5, 0.6]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_gpu_resource_is_refused_without_cuda(tmp_path):
    with pytest.raises(ConfigError, match=r"resource: 'gpu' but torch sees no CUDA device .* use 'cpu'"):
        load_experiment(_script_exp(tmp_path, resource="gpu"), automatic=True)


@pytest.mark.parametrize(("changes", "message"), [
    ({"search": {"pruner": [None, "l1_filtr"]}}, r"search\.pruner\[1\]: unknown pruner 'l1_filtr'\. Valid pruners "
                                                 r"\(closest first\): l1_filter, "),
    ({"search": {"pruner": ["int8_dynamic"]}}, r"search\.pruner\[0\]: 'int8_dynamic' is a quantizer, not a pruner"),
    ({"search": {"pruner": [None, "l1_filter"], "fpgm_sparsity": 0.3}},
     r"search\.fpgm_sparsity: sets a hyperparameter of 'fpgm', which search\.pruner never chooses"),
    ({"search": {"pruner": "l1_filter", "l1_filter_sparsty": 0.3}},
     r"search\.l1_filter_sparsty: .*has no hyperparameter 'sparsty'.*Did you mean 'sparsity'"),
    ({"search": {"prunner": ["l1_filter"]}}, r"search\.prunner: unknown SmashConfig key\. Valid keys \(closest "
                                             r"first\): pruner"),
    ({"search": {"pruner": "l1_filter", "l1_filter_sparsity": {"range": [0.2, 1.7], "type": "float"}}},
     r"search\.l1_filter_sparsity\.range: Invalid value 1\.7 for 'l1_filter_sparsity'"),
    ({"objectives": {"acuracy": "max"}}, r"objectives\.acuracy: not a measurement slimkit makes\. Valid \(closest "
                                         r"first\): accuracy"),
    ({"objectives": {"accuracy": "up"}}, r"objectives\.accuracy: 'up' is not a direction; use 'min' or 'max'"),
    ({"proposer": "cmaes"}, r"proposer: 'cmaes' optimises one objective but 2 are given"),
    ({"compression": {"compressor": "l1_filter"}}, r"compression: needs a 'script' that calls create_compressor"),
    ({"data": 3}, r"data: a slimkit\.data id such as 'Digits'"),
])
def test_script_free_errors_name_the_path(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message):
        load_experiment(_free_exp(tmp_path, **changes), automatic=True)


def test_file_level_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"experiment file '.*nope\.json' does not exist"):
        load_experiment(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "n_samples": 3,}')
    with pytest.raises(ConfigError, match=re.escape("is not valid JSON") + r".* at line 1, column \d+"):
        load_experiment(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"must hold one object \{\.\.\.\} of settings; got list"):
        load_experiment(bad)
