from __future__ import annotations

import json

import pytest

from slimkit.cli import main


def test_help_explains_commands(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for word in ("smash", "algorithms", "zoo", "examples:"):
        assert word in out


def test_smash_help_describes_the_default(capsys):
    with pytest.raises(SystemExit):
        main(["smash", "--help"])
    out = capsys.readouterr().out
    assert "MiniLM" in out and "--set KEY=VALUE" in out and "--no-save" in out


def test_algorithms_lists_hyperparameters_with_descriptions(capsys):
    assert main(["algorithms", "--group", "quantizer"]) == 0
    out = capsys.readouterr().out
    assert "int8_dynamic  [quantizer]  devices: cpu" in out
    assert "int8_dynamic_per_channel = True" in out
    assert "l1_filter" not in out


def test_algorithms_json(capsys):
    assert main(["algorithms", "--json"]) == 0
    infos = json.loads(capsys.readouterr().out)
    assert {i["name"] for i in infos} >= {"int8_dynamic", "half", "torch_compile", "level"}
    assert all(hp["desc"] for i in infos for hp in i["hyperparameters"])


def test_zoo_lists_models(capsys):
    assert main(["zoo"]) == 0
    out = capsys.readouterr().out.split()
    assert "minilm" in out and "digits_cnn" in out


def test_bad_hyperparameter_exits_2_with_message(capsys):
    code = main(["smash", "--model", "mlp", "--algorithm", "int8_dynamic", "--set", "int8_dynamic_bits=4", "--no-save"])
    assert code == 2
    assert "Algorithm 'int8_dynamic' has no hyperparameter 'bits'" in capsys.readouterr().err


def test_smash_other_model_and_recipe(tmp_path, capsys):
    code = main(["smash", "--model", "digits_cnn", "--algorithm", "level",
                 "--set", "level_sparsity=0.6", "--output", str(tmp_path / "d"),
                 "--repeats", "2", "--warmup", "1"])
    out = capsys.readouterr().out
    assert code == 0
    assert "test accuracy" in out and "outputs identical" in out
    assert (tmp_path / "d" / "model.safetensors").exists()


def test_default_demo_on_real_minilm(tmp_path, capsys):
    """The main job: MiniLM + int8_dynamic, table, save, reload, identical outputs (timing kept short here)."""
    code = main(["smash", "--output", str(tmp_path / "minilm"), "--repeats", "1", "--warmup", "0"])
    out = capsys.readouterr().out
    assert code == 0, out
    for row in ("size on disk", "parameters", "MACs", "latency median", "fidelity cosine mean", "retrieval top-1"):
        assert row in out
    assert "outputs identical to the smashed model" in out
    saved = json.loads((tmp_path / "minilm" / "smash_config.json").read_text())
    assert saved["algorithms"] == {"quantizer": "int8_dynamic"} and saved["base"]["name"] == "minilm"


@pytest.mark.parametrize("algorithm", ["l1_filter", "slim", "qat", "agp"])
def test_zoo_model_brings_inputs_and_data_for_every_kind_of_algorithm(algorithm, capsys):
    code = main(["smash", "--model", "digits_cnn", "--algorithm", algorithm, "--no-save", "--repeats", "1",
                 "--warmup", "0"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "added from the zoo model: example inputs" in captured.out and "test accuracy" in captured.out
    if algorithm in ("qat", "agp"):  # they train: the model's own offline data was added
        assert "dataset Digits" in captured.out


def test_missing_dataset_is_phrased_for_the_shell(capsys):
    code = main(["smash", "--model", "mlp", "--algorithm", "qat", "--no-save"])
    err = capsys.readouterr().err
    assert code == 2
    assert "qat needs a dataset; add one with `--data NAME`" in err
    assert "cfg." not in err and "smash()" not in err and "Traceback" not in err


def test_data_flag_and_debug_traceback(capsys):
    assert main(["smash", "--model", "mlp", "--algorithm", "qat", "--data", "NoSuchSet", "--no-save"]) == 2
    assert "NoSuchSet" in capsys.readouterr().err
    assert main(["--debug", "smash", "--model", "mlp", "--algorithm", "qat", "--no-save"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_shell_message_names_flags_not_python_calls():
    from slimkit.cli import shell_message

    text = ("Call cfg.add_example_inputs(inputs) with one batch, or cfg.add_data(...); or set "
            "cfg['l1_filter_speedup'] = False to keep zeros. Add cfg.add_data('PyDocText') and "
            "cfg.add_tokenizer(tok), or set cfg.device = 'cpu'.")
    out = shell_message(text)
    assert "cfg" not in out and "(" not in out.replace("(e.g.", "").replace("own)", "")
    assert "`--example-inputs FILE.safetensors`" in out and "`--set l1_filter_speedup=False`" in out
    assert "`--data PyDocText`" in out and "`--tokenizer FOLDER`" in out and "`--device cpu`" in out


def test_no_python_call_survives_in_any_error_text_shown_on_the_command_line():
    """Every message text in the algorithms, engine and config that tells the user to call ``cfg.<...>`` has a
    command-line phrasing."""
    import ast
    from pathlib import Path

    import slimkit
    from slimkit.cli import shell_message

    root = Path(slimkit.__file__).parent
    texts = []
    for folder in ("algorithms", "engine", "config", "engines/quantization/lowbit"):
        for path in (root / folder).rglob("*.py"):
            tree = ast.parse(path.read_text())
            docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                          if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
                          and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
            docstrings |= {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
            for node in ast.walk(tree):
                if id(node) in docstrings:  # docstrings, and the pieces of f-strings (read whole below)
                    continue
                if isinstance(node, ast.JoinedStr):  # a formatted value stands in as a name ('name' when !r)
                    text = "".join(v.value if isinstance(v, ast.Constant) else "'name'" if v.conversion == 114
                                   else "name" for v in node.values)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    text = node.value
                else:
                    continue
                if "cfg." in text or "cfg[" in text:
                    texts.append((path.name, text))
    assert len(texts) > 10
    left = [(name, shell_message(t)) for name, t in texts if "cfg." in shell_message(t) or "cfg[" in shell_message(t)]
    assert not left, left[:5]


_EXPERIMENT_SCRIPT = """#!/usr/bin/env python
import json, sys
config = json.load(open(sys.argv[1]))
sparsity = config["config_list"][0]["sparsity"]
print("#Auto: result=%r" % (1 - abs(sparsity - 0.5)))
"""


def _write_experiment(tmp_path, **fields):
    (tmp_path / "job.py").write_text(_EXPERIMENT_SCRIPT)
    exp = {"name": "cli", "script": "job.py", "n_samples": 3, "proposer": "random", "random_seed": 0,
           "compression": {"framework": "torch", "type": "pruning", "compressor": "l1_filter",
                           "config_list": [{"sparsity": {"range": [0.1, 0.9], "type": "float"}}]}}
    exp.update(fields)
    (tmp_path / "exp.json").write_text(json.dumps(exp))
    return tmp_path / "exp.json"


def test_run_and_report_an_experiment(tmp_path, capsys):
    exp = _write_experiment(tmp_path)
    assert main(["run", str(exp), "--automatic", "--output", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert "done 3/3 | running 0 | failed 0 | best result=" in captured.err
    assert "3 trial(s): 3 complete" in captured.out and "results.csv" in captured.out
    assert main(["report", str(tmp_path / "out")]) == 0
    again = capsys.readouterr().out
    assert "3 trial(s): 3 complete" in again and "config_list[0].sparsity=" in again


def test_run_errors_exit_2_with_the_field_path(tmp_path, capsys):
    exp = _write_experiment(tmp_path, proposer="bayes")
    assert main(["run", str(exp), "--automatic"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("slimkit: error: proposer: 'bayes' is not available. Valid proposers (closest first):")
    exp = _write_experiment(tmp_path)
    assert main(["run", str(exp)]) == 2  # ranges need --automatic
    assert "add --automatic to search it" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 2
    assert "is not an experiment folder" in capsys.readouterr().err


def test_python_m_slimkit_compression_runs_an_experiment(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    exp = _write_experiment(tmp_path, n_samples=2)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-m", "slimkit.compression", str(exp), "--automatic"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "2 trial(s): 2 complete" in done.stdout
    assert (tmp_path / "runs" / "cli" / "results.json").is_file()


def test_worker_needs_a_database_and_two_runners_on_one_folder_are_refused(tmp_path, capsys):
    from slimkit.experiment.storage import file_lock

    exp = _write_experiment(tmp_path)
    assert main(["worker", str(exp)]) == 2
    assert "slimkit worker joins a study in a database" in capsys.readouterr().err
    out = tmp_path / "out"
    out.mkdir()
    with file_lock(out / "runner.lock", blocking=False) as held:  # as a running `slimkit run` holds it
        assert held
        assert main(["run", str(exp), "--automatic", "--output", str(out)]) == 2
        assert "Another `slimkit run or worker` is running the experiment in" in capsys.readouterr().err
    with file_lock(out / "runner.lock", blocking=False, shared=True):  # as a running `slimkit worker` holds it
        assert main(["run", str(exp), "--automatic", "--output", str(out)]) == 2
    assert main(["run", str(exp), "--automatic", "--output", str(out)]) == 0  # free again: it runs
