"""@slimkit.aup_args (job config fields as a main function's arguments) and scripts reporting several objectives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import slimkit
from slimkit.errors import ConfigError
from slimkit.experiment import parse_result, run_experiment
from slimkit.faces.auptimizer import aup_save_model, print_result

JOB = {"compression_type": "pruning", "compression_framework": "torch", "compressor": "l1_filter",
       "config_list": [{"sparsity": 0.3, "op_types": ["Conv2d"]}], "folder_name": "out", "save_model": False,
       "job_id": 3, "lr": 0.1}


def test_aup_args_fills_parameters_from_the_job_config(tmp_path):
    @slimkit.aup_args
    def main(compression_type, compressor, config_list, folder_name=None, save_model=False, epochs=2):
        return dict(locals())

    path = tmp_path / "job.json"
    path.write_text(json.dumps(JOB))
    got = main(str(path))  # Auptimizer's main(sys.argv[1])
    assert got == {"compression_type": "pruning", "compressor": "l1_filter", "config_list": JOB["config_list"],
                   "folder_name": "out", "save_model": False, "epochs": 2}  # a default stays when the key is absent
    assert main(JOB, epochs=5)["epochs"] == 5  # a dict works too; keywords override

    @slimkit.aup_args
    def everything(job_id, **rest):
        return job_id, rest

    job_id, rest = everything(JOB)
    assert job_id == 3 and rest["lr"] == 0.1 and "job_id" not in rest

    @slimkit.aup_args
    def needs(config_list, learning_rate):
        return learning_rate

    with pytest.raises(ConfigError, match=r"needs\(\) needs learning_rate but the job config has no such key; its "
                                          r"keys: compression_framework, compression_type, .*runtime_args"):
        needs(JOB)
    with pytest.raises(ConfigError, match="called with the job config's path"):
        needs(42)


def test_aup_save_model_runs_only_when_the_experiment_saves(tmp_path):
    calls = []

    def export(folder_name, model_path):
        calls.append((folder_name, model_path))

    @slimkit.aup_args
    def main(save_model, folder_name):
        return aup_save_model(export, model_path="m.safetensors")

    main({**JOB, "save_model": False})
    main({**JOB, "save_model": True, "folder_name": str(tmp_path)})
    assert calls == [(str(tmp_path), "m.safetensors")]


def test_print_result_list_round_trips_and_bad_lists_are_refused(capsys):
    text = print_result([0.97, 3.5], params=1200)
    assert text.splitlines()[0] == "#Auto: result=[0.97, 3.5]"
    got = parse_result(capsys.readouterr().out)
    assert got.values == [0.97, 3.5] and got.metric == 0.97 and got.extra == {"params": 1200}
    assert parse_result("#Auto: result=0.5\n").values == [0.5]
    with pytest.raises(ConfigError, match="intermediate values are one number"):
        print_result([0.1, 0.2], step=1)
    with pytest.raises(ConfigError, match="one number per objective"):
        print_result([])
    with pytest.raises(ConfigError, match="not a number or a list of numbers"):
        parse_result('#Auto: result=["a"]\n')


# Auptimizer's decorator form of a real pruning script, reporting accuracy and parameter count.
AUP_SCRIPT = """#!/usr/bin/env python
import sys

import torch

import slimkit
from slimkit import zoo


@slimkit.aup_args
def main(compression_type, compression_framework, compressor, config_list, folder_name=None, save_model=False):
    config = locals()
    model, inputs = zoo.load("digits_cnn")
    pruner = slimkit.create_compressor(model, config)
    model = pruner.compress()
    model = pruner.apply_speedup(dummy_input=inputs[:1])
    _, _, x, y = zoo.digits_split()
    with torch.no_grad():
        accuracy = float((model(x).argmax(-1) == y).float().mean())
    slimkit.aup_save_model(pruner.export_model, model_path="model.safetensors")
    slimkit.print_result([accuracy, sum(p.numel() for p in model.parameters())])


if __name__ == "__main__":
    main(sys.argv[1])
"""


def _experiment(tmp_path: Path, script: str, objectives, n_samples: int) -> Path:
    (tmp_path / "job.py").write_text(script)
    path = tmp_path / "two.json"
    path.write_text(json.dumps({
        "name": "two", "script": "job.py", "n_samples": n_samples, "random_seed": 0, "objectives": objectives,
        "resource_args": {"save_model": True},
        "compression": {"framework": "torch", "type": "pruning", "compressor": "l1_filter",
                        "config_list": [{"sparsity": {"range": [0.1, 0.8], "type": "float"},
                                         "op_types": ["Conv2d"]}]}}))
    return path


@pytest.mark.slow  # ~45 s: three pruning jobs, each a fresh Python process importing torch
def test_a_decorated_script_searches_two_objectives_and_keeps_the_pareto_models(tmp_path):
    exp = _experiment(tmp_path, AUP_SCRIPT, {"accuracy": "max", "params": "min"}, n_samples=3)
    result = run_experiment(exp, automatic=True, quiet=True)
    assert len(result.rows) == 3 and all(r["state"] == "complete" for r in result.rows), result.rows[0]["reason"]
    rows = {r["number"]: r for r in result.rows}
    counts = [r["values"]["params"] for r in result.rows]  # the objective; r["params"] are the searched values
    assert len(set(counts)) == 3 and all(r["params"]["config_list[0].sparsity"] > 0 for r in result.rows)
    pairs = {r["number"]: (r["values"]["accuracy"], r["values"]["params"]) for r in result.rows}
    for r in result.rows:  # kept = not dominated: no other trial as accurate with as few parameters
        acc, n = pairs[r["number"]]
        dominated = any(a >= acc and p <= n and (a, p) != (acc, n) for a, p in pairs.values())
        assert r["kept"] == (not dominated)
        has_model = (result.folder / r["trial_dir"] / "model" / "model.safetensors").is_file()
        assert has_model == r["kept"]  # aup_save_model exported; only the Pareto set stays
    assert result.best and all(rows[n]["kept"] for n in result.kept)
    assert (result.folder / "pareto.png").is_file()


def test_a_script_reporting_the_wrong_number_of_values_fails_that_trial(tmp_path):
    script = "#!/usr/bin/env python\nprint('#Auto: result=[0.5]')\n"
    exp = _experiment(tmp_path, script, {"accuracy": "max", "latency_ms": "min"}, n_samples=1)
    (row,) = run_experiment(exp, automatic=True, quiet=True).rows
    assert row["state"] == "failed"
    assert "reported 1 value(s) but the experiment names 2 objective(s) (accuracy, latency_ms)" in row["reason"]
    data = json.loads(exp.read_text())
    data["objectives"] = {"accuracy": "up"}
    exp.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="objectives.accuracy: 'up' is not a direction"):
        run_experiment(exp, automatic=True, quiet=True)
