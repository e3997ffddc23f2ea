"""Docs that run and generated docs that are fresh."""

from __future__ import annotations

import re
from pathlib import Path

import slimkit
from slimkit.algorithms.docs import README_END, README_START, algorithms_markdown, summary_table

ROOT = Path(__file__).resolve().parents[1]


def test_algorithm_reference_is_fresh():
    assert (ROOT / "docs" / "algorithms.md").read_text() == algorithms_markdown(), "run `make docs`"


def test_readme_algorithm_table_is_fresh():
    text = (ROOT / "README.md").read_text()
    block = text[text.index(README_START) + len(README_START) : text.index(README_END)]
    assert block.strip() == summary_table().strip(), "run `make docs`"


def test_readme_quickstart_runs_as_written(tmp_path, monkeypatch):
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python example"
    monkeypatch.chdir(tmp_path)
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {"__name__": "__readme__"})
    assert (tmp_path / "smashed" / "quickstart" / "model.safetensors").exists()


def test_user_guide_examples_run(tmp_path, monkeypatch):
    text = (ROOT / "docs" / "guide.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    for code in blocks:
        exec(compile(code, "docs/guide.md", "exec"), {"__name__": "__guide__"})


def test_public_names_are_sorted_and_importable():
    assert slimkit.__all__ == sorted(slimkit.__all__)
    for name in slimkit.__all__:
        assert hasattr(slimkit, name), name


def test_readme_what_to_type_commands_run(tmp_path, monkeypatch, capsys):
    import shlex

    from slimkit.cli import main

    text = (ROOT / "README.md").read_text()
    block = text[text.index("<!-- commands:start -->") : text.index("<!-- commands:end -->")]
    commands = re.findall(r"`(slimkit smash [^`]+)`", block)
    assert len(commands) >= 5
    monkeypatch.chdir(tmp_path)
    for command in commands:
        code = main(shlex.split(command)[1:] + ["--repeats", "1", "--warmup", "0"])
        captured = capsys.readouterr()
        assert code == 0, f"{command}\n{captured.err[-1500:]}"
        assert "fidelity" in captured.out
