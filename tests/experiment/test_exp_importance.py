"""Parameter importance: Optuna's fANOVA over the complete trials, in results.json, importance.png and the table."""

from __future__ import annotations

import json
from pathlib import Path

from slimkit.experiment import report_experiment, run_experiment

# The metric depends on the first layer's sparsity only; the second layer's is noise-free and irrelevant.
SCRIPT = """#!/usr/bin/env python
import json, sys
config = json.load(open(sys.argv[1]))
first, second = (entry["sparsity"] for entry in config["config_list"])
print("#Auto: result=%r" % (-(first - 0.6) ** 2 + 1e-4 * second))
"""


def test_importance_ranks_the_parameter_that_matters(tmp_path: Path, capsys):
    (tmp_path / "job.py").write_text(SCRIPT)
    ranged = {"range": [0.1, 0.9], "type": "float"}
    exp = tmp_path / "imp.json"
    exp.write_text(json.dumps({
        "name": "imp", "script": "job.py", "target": "max", "proposer": "random", "random_seed": 2,
        "n_samples": 12, "compression": {"framework": "torch", "type": "pruning", "compressor": "l1_filter",
                                         "config_list": [{"sparsity": ranged, "op_names": ["conv1"]},
                                                         {"sparsity": ranged, "op_names": ["conv2"]}]}}))
    result = run_experiment(exp, automatic=True, quiet=True)
    scores = result.importance["result"]
    assert set(scores) == {"config_list[0].sparsity", "config_list[1].sparsity"}
    first, second = scores["config_list[0].sparsity"], scores["config_list[1].sparsity"]
    assert first > 0.6 and first > 3 * second  # 12 random trials: fANOVA sees the one that matters
    assert abs(sum(scores.values()) - 1.0) < 1e-6
    png = result.folder / "importance.png"
    assert png in result.files and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000
    saved = json.loads((result.folder / "results.json").read_text())
    assert saved["importance"]["result"] == scores
    png.unlink()
    again = report_experiment(result.folder)  # `slimkit report` recomputes (seeded) and redraws it
    assert again.importance == result.importance and png.is_file()
    assert f"parameter importance for result (fANOVA): config_list[0].sparsity {first:.2f}, " in (
        capsys.readouterr().out)


def test_one_trial_gives_no_importance_and_no_plot(tmp_path: Path):
    (tmp_path / "job.py").write_text(SCRIPT)
    exp = tmp_path / "one.json"
    exp.write_text(json.dumps({
        "name": "one", "script": "job.py", "n_samples": 1, "random_seed": 0,
        "compression": {"framework": "torch", "type": "pruning", "compressor": "l1_filter",
                        "config_list": [{"sparsity": {"range": [0.1, 0.9], "type": "float"}, "op_names": ["a"]},
                                        {"sparsity": 0.5, "op_names": ["b"]}]}}))
    result = run_experiment(exp, automatic=True, quiet=True)
    assert result.importance == {"result": {}} and not (result.folder / "importance.png").exists()
