"""NNI 2.x's quantization calls: calibration keys, quant schemes, ObserverQuantizer, NaiveQuantizer, export device."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from slimkit.compression import (
    NaiveQuantizer,
    ObserverQuantizer,
    QAT_Quantizer,
    load_calibration,
    set_quant_scheme_dtype,
)
from slimkit.engines.quantization.config import QuantizationConfigError
from slimkit.engines.quantization.settings import reset_quant_scheme_dtype


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3)
        self.relu1 = nn.ReLU6()
        self.fc1 = nn.Linear(4 * 6 * 6, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc1(self.relu1(self.conv1(x)).flatten(1))


@pytest.fixture(autouse=True)
def _schemes():
    reset_quant_scheme_dtype()
    yield
    reset_quant_scheme_dtype()


CONFIG = [{"quant_types": ["weight", "input"], "quant_bits": {"weight": 8, "input": 8}, "op_names": ["conv1", "fc1"]},
          {"quant_types": ["output"], "quant_bits": {"output": 8}, "op_names": ["relu1"]}]


def test_qat_calibration_has_nni2_range_keys_and_round_trips(tmp_path):
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    quantizer = QAT_Quantizer(model, CONFIG, optimizer, dummy_input=torch.rand(1, 1, 8, 8))
    quantizer.compress()
    model.train()
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.rand(16, 1, 8, 8)).sum().backward()
        optimizer.step()
    calibration = quantizer.export_model(tmp_path / "m.safetensors", tmp_path / "c.safetensors")
    conv, relu = calibration["conv1"], calibration["relu1"]
    assert conv["weight_bits"] == 8 and conv["input_bits"] == 8 and relu["output_bits"] == 8
    assert conv["tracked_min_input"] == 0.0 and 0.9 < conv["tracked_max_input"] <= 1.01  # inputs in [0, 1)
    assert relu["tracked_min_output"] == 0.0 and relu["tracked_max_output"] <= 6.05  # ReLU6
    assert isinstance(relu["tracked_max_output"], float)
    loaded = load_calibration(tmp_path / "c.safetensors")
    assert loaded["relu1"]["tracked_max_output"] == pytest.approx(relu["tracked_max_output"])
    assert torch.equal(loaded["conv1"]["weight_scale"], conv["weight_scale"])


def test_quant_schemes_choose_symmetric_and_per_tensor_grids():
    set_quant_scheme_dtype("weight", "per_tensor_symmetric", "int")
    model = Net()
    quantizer = QAT_Quantizer(model, CONFIG, torch.optim.SGD(model.parameters(), lr=0.0))
    model(torch.rand(2, 1, 8, 8))
    calibration = quantizer.calibration_config()
    assert calibration["fc1"]["weight_scale"].numel() == 1 and float(calibration["fc1"]["weight_zero_point"]) == 128
    weight = model.fc1.module.weight.detach()
    assert float(calibration["fc1"]["weight_scale"]) == pytest.approx(float(weight.abs().max()) / 127.5)
    entry = [{**CONFIG[0], "quant_scheme": {"weight": "per_channel_affine"}}]  # the entry overrides the default
    other = Net()
    per_channel = QAT_Quantizer(other, entry, torch.optim.SGD(other.parameters(), lr=0.0))
    other(torch.rand(2, 1, 8, 8))
    assert per_channel.calibration_config()["conv1"]["weight_scale"].numel() == 4
    third = Net()  # a per-channel input: one symmetric range per channel (dim 1), NNI 3.0's activation granularity
    channels = QAT_Quantizer(third, [{**CONFIG[0], "quant_scheme": "per_channel_symmetric"}])
    seen = {}
    third.fc1.register_forward_pre_hook(lambda wrapper, args: seen.update(x=args[0].detach()))
    third(torch.rand(2, 1, 8, 8))
    flat = seen["x"]
    assert channels.calibration_config()["fc1"]["input_scale"].shape == (1, 144)
    assert torch.allclose(channels.calibration_config()["fc1"]["input_scale"].flatten(),
                          flat.abs().amax(0).clamp(min=1e-8) / 127.5)
    with pytest.raises(QuantizationConfigError, match=r"scheme 'per_layer' is unknown.* per_tensor_affine"):
        set_quant_scheme_dtype("weight", "per_layer")


def test_observer_quantizer_observes_then_quantizes(tmp_path):
    torch.manual_seed(0)
    model = Net().eval()
    x = torch.rand(32, 1, 8, 8)
    reference = model(x)
    quantizer = ObserverQuantizer(model, CONFIG)
    with pytest.raises(QuantizationConfigError, match=r"saw no input of layer 'conv1'"):
        quantizer.compress()
    with torch.no_grad():
        assert torch.equal(model(x), reference)  # calibration leaves the outputs alone
    quantizer.compress()
    with torch.no_grad():
        quantized = model(x)
    assert not torch.equal(quantized, reference) and (quantized - reference).abs().max() < 0.05
    calibration = quantizer.export_model(tmp_path / "m.safetensors", tmp_path / "c.safetensors")
    assert calibration["conv1"]["tracked_min_input"] == 0.0
    with torch.no_grad():
        top = float(model.relu1.module(model.conv1.module(x)).max())
    assert calibration["relu1"]["tracked_max_output"] == pytest.approx(top, rel=0.02)


def test_naive_quantizer_empty_config_means_8_bit_conv_and_linear_weights():
    torch.manual_seed(0)
    model = Net()
    quantizer = NaiveQuantizer(model, [])
    assert [w.name for w in quantizer.modules_wrapper] == ["conv1", "fc1"]
    weight = model.fc1.module.weight.detach().clone()
    quantized = quantizer.quantized_weight(quantizer.modules_wrapper[1])
    scale = float(weight.abs().max()) / 127.5
    assert len(torch.unique(quantized)) <= 256 and (quantized - weight).abs().max() <= scale / 2 + 1e-7


@pytest.mark.skipif(torch.cuda.is_available(), reason="the fallback is for machines without CUDA")
def test_export_on_cuda_without_one_traces_on_the_cpu(tmp_path):
    model = Net()
    quantizer = QAT_Quantizer(model, CONFIG, torch.optim.SGD(model.parameters(), lr=0.0))
    model(torch.rand(2, 1, 8, 8))
    with pytest.warns(UserWarning, match=r"no CUDA device here; the ONNX graph is traced on the CPU"):
        quantizer.export_model(tmp_path / "m.safetensors", tmp_path / "c.safetensors", tmp_path / "m.onnx",
                               (1, 1, 8, 8), torch.device("cuda"))
    assert (tmp_path / "m.onnx").stat().st_size > 1000
