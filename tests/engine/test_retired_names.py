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
    saved = load_file(str(folder / "model.safetensors"))
    state = loaded.model.state_dict()
    assert saved.keys() <= state.keys() and all(torch.equal(state[k].cpu(), v) for k, v in saved.items())
    with torch.no_grad():  # computed on another machine: matmul kernels may differ there in the last bits
        torch.testing.assert_close(loaded(expected["input"]).cpu(), expected["output"], atol=1e-6, rtol=1e-5)


def test_old_name_in_a_config_means_the_new_algorithm():
    cfg = SmashConfig({"torch_unstructured": {"sparsity": 0.4, "target_modules": ["Linear"]}})
    assert cfg["pruner"] == "level"
    assert cfg["level_op_types"] == ("Linear",) and cfg["torch_unstructured_sparsity"] == 0.4
