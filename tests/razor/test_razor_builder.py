"""register_module / build over the one registry, and config files with _base_ and _delete_."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from slimkit.core import registry
from slimkit.errors import AlgorithmNotFoundError, ConfigError, RegistryError
from slimkit.razor import BaseAlgorithm, build, load_config, register_module
from slimkit.training.distill import KLDivergence


@register_module()
class RazorTinyNet(nn.Module):
    def __init__(self, width: int = 8, classes: int = 3) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, width), nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def test_build_is_recursive_and_uses_the_one_registry():
    algo = build(dict(type="BaseAlgorithm", architecture=dict(type="RazorTinyNet", width=5)))
    assert isinstance(algo, BaseAlgorithm) and algo.architecture.fc1.out_features == 5
    assert registry.get_component("RazorTinyNet") is RazorTinyNet
    assert "RazorTinyNet" in registry.component_names("model")
    assert isinstance(build(dict(type="KLDivergence", tau=4)), KLDivergence)


def test_unknown_type_and_bad_fields_are_clear():
    with pytest.raises(AlgorithmNotFoundError, match="Unknown component type 'RazorTinyNt'.*'RazorTinyNet'"):
        build(dict(type="RazorTinyNt"))
    with pytest.raises(ConfigError, match=r"RazorTinyNet \(.*\) has no field 'widht'.*'width'.*takes: width, classes"):
        build(dict(type="RazorTinyNet", widht=3))
    with pytest.raises(ConfigError, match="LinearConnector .* needs the field 'out_features'"):
        build(dict(type="LinearConnector", in_features=3))
    with pytest.raises(ConfigError, match="needs a dict with a 'type' key"):
        build({"tau": 3})
    with pytest.raises(ConfigError, match="write @register_module\\(\\)"):
        register_module(RazorTinyNet)


def test_component_names_never_collide_with_algorithm_names():
    with pytest.raises(RegistryError, match="already the algorithm 'l1_filter'"):
        registry.register_component(RazorTinyNet, "model", "L1FilterPruner")
    with pytest.raises(RegistryError, match="already the algorithm 'kd_recover'"):
        registry.register_component(RazorTinyNet, "model", "kd_recover")
    with pytest.raises(RegistryError, match="registered twice"):
        registry.register_component(RazorTinyNet, "model", "KLDivergence")


def test_configs_from_json_and_yaml_with_base_and_delete(tmp_path):
    (tmp_path / "base.json").write_text(json.dumps({
        "model": {"type": "BaseAlgorithm", "architecture": {"type": "RazorTinyNet", "width": 6, "classes": 3}},
        "train": {"epochs": 3, "lr": 0.1}}))
    (tmp_path / "child.yaml").write_text(
        "_base_: base.json\n"
        "model:\n  architecture:\n    width: 7\n"
        "train:\n  _delete_: true\n  steps: 10\n")
    cfg = load_config(tmp_path / "child.yaml")
    assert cfg["model"]["architecture"] == {"type": "RazorTinyNet", "width": 7, "classes": 3}  # merged
    assert cfg["train"] == {"steps": 10}  # replaced
    assert build(cfg["model"]).architecture.fc1.out_features == 7
    assert load_config({"_base_": str(tmp_path / "base.json"), "train": {"lr": 0.5}})["train"] == {"epochs": 3,
                                                                                                    "lr": 0.5}
    (tmp_path / "loop.json").write_text(json.dumps({"_base_": "loop.json"}))
    with pytest.raises(ConfigError, match="cycle"):
        load_config(tmp_path / "loop.json")
    (tmp_path / "x.txt").write_text("{}")
    with pytest.raises(ConfigError, match=r"must end in \.py, \.json, \.yaml or \.yml"):
        load_config(tmp_path / "x.txt")


def test_mmcls_cls_data_preprocessor_normalises_like_img_data_preprocessor():
    x = torch.rand(2, 3, 4, 4) * 255
    pre = build(dict(type="mmcls.ClsDataPreprocessor", num_classes=1000, mean=[123.675, 116.28, 103.53],
                     std=[58.395, 57.12, 57.375], to_rgb=True))
    mean = torch.tensor([123.675, 116.28, 103.53]).view(1, 3, 1, 1)
    std = torch.tensor([58.395, 57.12, 57.375]).view(1, 3, 1, 1)
    torch.testing.assert_close(pre(x), (x.flip(1) - mean) / std)
    with pytest.raises(ConfigError, match="batch_augments=.*is not supported"):
        build(dict(type="mmcls.ClsDataPreprocessor", batch_augments=dict(augments=[dict(type="Mixup", alpha=0.2)])))
