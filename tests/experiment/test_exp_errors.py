"""create_compressor and Compressor refuse bad input with messages that say how to fix it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from slimkit.errors import ConfigError, SaveLoadError
from slimkit.faces.auptimizer import create_compressor, load_compressed_model, parse_compression_config

CONFIG_LIST = [{"sparsity": 0.5, "op_types": ["Conv2d"]}]


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv2(torch.relu(self.conv1(x)))).mean((2, 3)))


@pytest.fixture
def net() -> Net:
    torch.manual_seed(0)
    return Net()


def test_unknown_compressor_lists_names_closest_first(net):
    with pytest.raises(ConfigError, match=r"Unknown compressor 'l1filter'\. Valid names \(closest first\): "
                                          r"l1_filter, l2_filter, ") as info:
        create_compressor(net, {"compressor": "l1filter", "config_list": CONFIG_LIST})
    assert "taylor_fo_weight" in str(info.value) and "qat" not in str(info.value).split("Valid")[0]


def test_type_and_framework_checks(net):
    with pytest.raises(ConfigError, match=r"'l1_filter' is a pruning compressor but the experiment says type "
                                          r"'quantization'"):
        create_compressor(net, {"compression": {"type": "quantization", "compressor": "l1_filter",
                                                "config_list": CONFIG_LIST}})
    with pytest.raises(ConfigError, match=r"Compression type 'distill' is not supported; use one of pruning, "
                                          r"quantization"):
        create_compressor(net, {"type": "distill", "compressor": "l1_filter", "config_list": CONFIG_LIST})
    with pytest.raises(ConfigError, match=r"framework 'tensorflow' is not supported.*'framework': 'torch'"):
        create_compressor(net, {"framework": "tensorflow", "compressor": "l1_filter", "config_list": CONFIG_LIST})
    with pytest.raises(ConfigError, match=r"both 'type' and 'compression_type' with different values"):
        create_compressor(net, {"type": "pruning", "compression_type": "quantization", "compressor": "l1_filter",
                                "config_list": CONFIG_LIST})


def test_config_shape_errors(net):
    with pytest.raises(ConfigError, match=r"Unknown key 'config_lst' in the experiment's 'compression' block\. "
                                          r"Did you mean 'config_list'"):
        create_compressor(net, {"compression": {"compressor": "l1_filter", "config_lst": CONFIG_LIST}})
    with pytest.raises(ConfigError, match=r"has no 'compressor'; add e\.g\. 'compressor': 'l1_filter'"):
        create_compressor(net, {"config_list": CONFIG_LIST})
    with pytest.raises(ConfigError, match=r"create_compressor\(model, 'l1_filter'\) needs config_list"):
        create_compressor(net, "l1_filter")
    with pytest.raises(ConfigError, match=r"config_list is given both in the config and as an argument"):
        create_compressor(net, {"compressor": "l1_filter", "config_list": CONFIG_LIST}, config_list=CONFIG_LIST)
    with pytest.raises(ConfigError, match=r"config_list\[0\]\['sparsity'\] is a search space .*--automatic"):
        create_compressor(net, {"compressor": "l1_filter", "config_list": [
            {"sparsity": {"range": [0.6, 0.8], "type": "float"}, "op_types": ["Conv2d"]}]})
    with pytest.raises(ConfigError, match=r"op_name 'conv9' is not a layer of this model"):
        create_compressor(net, "l1_filter", config_list=[{"sparsity": 0.5, "op_names": ["conv9"]}])
    with pytest.raises(ConfigError, match=r"needs a torch\.nn\.Module; got str"):
        create_compressor("model", "l1_filter", config_list=CONFIG_LIST)


def test_expand_op_names_is_dropped_for_a_fixed_run():
    settings = parse_compression_config({"compressor": "l1_filter", "config_list": [
        {"sparsity": 0.3, "op_names": ["conv1", "conv2"], "expand_op_names": False}]})
    assert settings.config_list == [{"sparsity": 0.3, "op_names": ["conv1", "conv2"]}]


def test_unknown_compressor_argument(net):
    with pytest.raises(ConfigError, match=r"Compressor 'agp' takes no argument 'num_iteration'\. It accepts: "
                                          r"pruning_algorithm, initial_sparsity, num_iterations"):
        create_compressor(net, "agp", config_list=CONFIG_LIST, num_iteration=3)
    with pytest.raises(ConfigError, match=r"needs dummy_input"):
        create_compressor(net, "l1_filter", config_list=CONFIG_LIST, dependency_aware=True)


def test_speedup_refusals(net):
    x = torch.randn(1, 1, 6, 6)
    level = create_compressor(net, "level", config_list=[{"sparsity": 0.5, "op_types": ["default"]}], dummy_input=x)
    level.compress()
    with pytest.raises(ConfigError, match=r"cannot shrink a 'level'-pruned model: level pruning zeroes single "
                                          r"weights.*'l1_filter'"):
        level.apply_speedup()
    level.engine.unwrap_model()

    torch.manual_seed(0)
    fresh = Net()
    comp = create_compressor(fresh, "l1_filter", config_list=CONFIG_LIST)
    with pytest.raises(ConfigError, match=r"apply_speedup\(\) before compress\(\)"):
        comp.apply_speedup(x)
    comp.compress()
    with pytest.raises(ConfigError, match=r"needs dummy_input, an input the model accepts"):
        comp.apply_speedup()
    comp.apply_speedup(x)
    with pytest.raises(ConfigError, match=r"apply_speedup\(\) already ran"):
        comp.apply_speedup(x)
    with pytest.raises(ConfigError, match=r"compress\(\) after apply_speedup\(\)"):
        comp.compress()


def test_a_failed_speedup_leaves_the_compressor_wrapped():
    class Fixed(nn.Module):  # a hard-coded reshape breaks once channels are removed
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(1, 4, 3, padding=1)
            self.fc = nn.Linear(4 * 4 * 4, 2)

        def forward(self, x):
            return self.fc(self.conv(x).view(-1, 64))

    torch.manual_seed(0)
    model, x = Fixed(), torch.randn(1, 1, 4, 4)
    comp = create_compressor(model, "l1_filter", config_list=[{"sparsity": 0.5, "op_names": ["conv"]}], dummy_input=x)
    comp.compress()
    with pytest.raises(Exception, match=r"view|reshape|x\.flatten"):
        comp.apply_speedup()
    assert not comp.speedup_applied and comp.engine.is_wrapped and model.conv.module.out_channels == 4


def test_quantization_kind_is_refused_for_speedup(net):
    comp = create_compressor(net, {"type": "quantization", "compressor": "qat",
                                   "config_list": [{"quant_types": ["weight"], "quant_bits": 8}]})
    assert comp.kind == "quantization" and comp.compress() is net
    with pytest.raises(ConfigError, match=r"apply_speedup\(\) needs a pruning compressor; 'qat' is a "
                                          r"quantization compressor"):
        comp.apply_speedup(torch.randn(1, 1, 6, 6))
    with pytest.raises(ConfigError, match=r"for type 'quantization'\. Valid names \(closest first\): qat, "):
        create_compressor(net, {"type": "quantization", "compressor": "qat_x", "config_list": CONFIG_LIST})
    with pytest.raises(ConfigError, match=r"export_model\(speedup=True\) removes pruned channels; 'qat' is a "
                                          r"quantization compressor"):
        comp.export_model("m.safetensors", speedup=True)
    with pytest.raises(ConfigError, match=r"export_model\(\) got unexpected argument\(s\) save_all\. It takes "
                                          r"model_path, mask_path, .* and the keys of the job config"):
        comp.export_model("m.safetensors", save_all=True)


def test_load_compressed_model_errors(tmp_path, net):
    with pytest.raises(SaveLoadError, match=r"does not exist; pass the model_path export_model wrote"):
        load_compressed_model(net, tmp_path / "missing.safetensors")
    comp = create_compressor(net, "l1_filter", config_list=CONFIG_LIST)
    comp.compress()
    comp.export_model(tmp_path / "m.safetensors")
    torch.manual_seed(0)
    other = nn.Sequential(nn.Linear(2, 2))
    with pytest.raises(SaveLoadError, match=r"do not fit this model"):
        load_compressed_model(other, tmp_path / "m.safetensors")
