"""Saves written under a retired algorithm name still load: torch_unstructured is now level."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from slimkit import SmashConfig, SmashedModel

FIXTURES = Path(__file__).parent.parent / "fixtures"


def test_torch_unstructured_save_from_before_the_rename_loads_identically():
    folder = FIXTURES / "save_v1_torch_unstructured_mlp"
    expected = load_file(str(folder.with_name(folder.name + ".expected.safetensors")))
    loaded = SmashedModel.from_pretrained(folder)
    assert loaded.algorithms == ["level"]
    hps = loaded.smash_config.hyperparameters_of("level")
    assert hps["op_types"] == ("Linear", "Conv2d") and hps["method"] == "random" and hps["seed"] == 3
    with torch.no_grad():
        assert torch.equal(loaded(expected["input"]), expected["output"])


def test_old_name_in_a_config_means_the_new_algorithm():
    cfg = SmashConfig({"torch_unstructured": {"sparsity": 0.4, "target_modules": ["Linear"]}})
    assert cfg["pruner"] == "level"
    assert cfg["level_op_types"] == ("Linear",) and cfg["torch_unstructured_sparsity"] == 0.4
