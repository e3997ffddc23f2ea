"""Models from anywhere: a local Hugging Face folder or a package.module:factory, smashed from the shell."""

from __future__ import annotations

import textwrap

import pytest
import torch

from slimkit import SmashedModel, zoo
from slimkit.cli import main
from slimkit.errors import ConfigError, SaveLoadError
from slimkit.zoo.sources import load_source

FACTORY = textwrap.dedent('''
    import torch
    from torch import nn


    def make():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        return model, torch.randn(8, 16)
''')


def test_hf_folder_smashes_with_rtn_and_reloads(tmp_path, capsys):
    folder = tmp_path / "tiny-llama"
    zoo.build("tiny_llama").save_pretrained(folder)
    loaded = load_source(folder)
    assert loaded.task == "causal_lm" and loaded.example_inputs["input_ids"].shape == (2, 16)
    code = main(["smash", "--model", str(folder), "--algorithm", "rtn", "--set", "rtn_group_size=32",
                 "--output", str(tmp_path / "out"), "--repeats", "1", "--warmup", "0"])
    out = capsys.readouterr().out
    assert code == 0 and "outputs identical" in out
    again = SmashedModel.from_pretrained(tmp_path / "out")  # rebuilt from the recorded config, no code imported
    with torch.no_grad():
        assert torch.isfinite(again(**loaded.example_inputs).logits).all()


def test_factory_model_needs_trust_code_to_reload(tmp_path, monkeypatch, capsys):
    (tmp_path / "my_models.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(["smash", "--model", "my_models:make", "--algorithm", "l1_filter", "--output", str(tmp_path / "o"),
                 "--repeats", "1", "--warmup", "0"])
    assert code == 0 and "outputs identical" in capsys.readouterr().out
    with pytest.raises(SaveLoadError, match=r"factory 'my_models:make'; loading it means importing and running "
                                            r"'my_models'\. Pass trust_code=True"):
        SmashedModel.from_pretrained(tmp_path / "o")
    trusted = SmashedModel.from_pretrained(tmp_path / "o", trust_code=True)
    assert trusted.model[0].out_features < 32  # the pruned structure was replayed on the factory's model


def test_unknown_source_lists_the_three_forms(tmp_path):
    with pytest.raises(ConfigError, match=r"give a zoo name .*, a local Hugging Face folder .*package\.module:factory"):
        load_source("no-such-model")
    with pytest.raises(ConfigError, match=r"has no config\.json"):
        load_source(tmp_path)
    with pytest.raises(ConfigError, match=r"module 'nope_missing' cannot be imported"):
        load_source("nope_missing:make")
