"""NNI 2.x's quantizers as its users drive them: QAT, DoReFa, LSQ and the observer quantizer on real digits.

``config_list`` entries with ``quant_types``, ``quant_bits`` (a dict or one int) and ``op_names`` / ``op_types``
(including ReLU and pooling modules for ``output``); ``set_quant_scheme_dtype``; ``quantizer.compress()``, then
the user's own training or calibration loop; ``export_model(model_path, calibration_path[, onnx_path,
input_shape, device])`` returning the calibration config; ``ModelSpeedupTensorRT`` refusing with slimkit's path.
The tests check the calibration config's keys and numbers against the data, the exported files and the accuracy.
"""

from __future__ import annotations

import copy

import onnx
import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from slimkit.compression import (
    DoReFaQuantizer,
    LsqQuantizer,
    ModelSpeedupTensorRT,
    ObserverQuantizer,
    QAT_Quantizer,
    load_calibration,
    set_quant_scheme_dtype,
)
from slimkit.engines.quantization.settings import reset_quant_scheme_dtype
from slimkit.errors import ConfigError
from tests.faces.nni.digits import PlainCNN, accuracy, make_trainer, train

#: the layers and types NNI's examples quantize: conv weights and inputs, ReLU and pooling outputs
CONV_RELU_POOL = [
    {"quant_types": ["weight", "input"], "quant_bits": {"weight": 8, "input": 8}, "op_names": ["conv1"]},
    {"quant_types": ["output"], "quant_bits": {"output": 8}, "op_names": ["relu1"]},
    {"quant_types": ["weight", "input"], "quant_bits": {"weight": 8, "input": 8}, "op_names": ["conv2"]},
    {"quant_types": ["output"], "quant_bits": {"output": 8}, "op_names": ["relu2"]},
    {"quant_types": ["output"], "quant_bits": {"output": 8}, "op_names": ["pool"]},
]


@pytest.fixture(scope="module")
def plain_state(digits) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return train(PlainCNN(), digits[0], epochs=2).state_dict()


@pytest.fixture
def plain(plain_state) -> PlainCNN:
    model = PlainCNN()
    model.load_state_dict(plain_state)
    return model.eval()


@pytest.fixture
def schemes():
    """``set_quant_scheme_dtype`` sets process-wide defaults: forget them after the test."""
    yield set_quant_scheme_dtype
    reset_quant_scheme_dtype()


def _fit(model: nn.Module, batches, optimizer: torch.optim.Optimizer) -> None:
    make_trainer(batches)(model, optimizer, nn.functional.cross_entropy)


def test_qat_quantizer_with_symmetric_schemes_exports_weights_onnx_and_calibration(plain, digits, tmp_path,
                                                                                   schemes):
    train_batches, test_batches = digits
    config_list = [
        {"quant_types": ["weight", "input"], "quant_bits": {"weight": 8, "input": 8}, "op_names": ["conv1", "conv2"]},
        {"quant_types": ["output"], "quant_bits": {"output": 8}, "op_names": ["relu1", "relu2"]},
        {"quant_types": ["output", "weight", "input"], "quant_bits": {"output": 8, "weight": 8, "input": 8},
         "op_names": ["fc1", "fc2"]},
    ]
    schemes("weight", "per_channel_symmetric", "int")
    schemes("output", "per_tensor_symmetric", "int")
    schemes("input", "per_tensor_symmetric", "int")
    optimizer = torch.optim.SGD(plain.parameters(), lr=0.01, momentum=0.5)
    quantizer = QAT_Quantizer(plain, config_list, optimizer, dummy_input=torch.randn(1, 1, 8, 8))
    quantizer.compress()
    _fit(plain, train_batches, optimizer)
    assert accuracy(plain, test_batches) >= 0.85

    paths = [tmp_path / name for name in ("model.safetensors", "calibration.safetensors", "model.onnx")]
    calibration = quantizer.export_model(*paths, input_shape=(1, 1, 8, 8), device="cpu")
    assert sorted(calibration) == ["conv1", "conv2", "fc1", "fc2", "relu1", "relu2"]
    conv1, relu1, conv2, fc1 = (calibration[name] for name in ("conv1", "relu1", "conv2", "fc1"))
    assert set(conv1) == {"weight_bits", "weight_scale", "weight_zero_point", "input_bits", "input_scale",
                          "input_zero_point", "tracked_min_input", "tracked_max_input"}
    assert set(relu1) == {"output_bits", "output_scale", "output_zero_point", "tracked_min_output",
                          "tracked_max_output"}
    assert conv1["weight_bits"] == conv1["input_bits"] == relu1["output_bits"] == 8
    assert conv1["weight_scale"].numel() == 8 and fc1["weight_scale"].numel() == 32  # per output channel
    for entry in calibration.values():  # symmetric: every grid is centred on zero (unsigned codes, offset 128)
        assert all(bool((v == 128).all()) for k, v in entry.items() if k.endswith("zero_point"))
    step = float(conv1["input_scale"])
    assert conv1["tracked_max_input"] == pytest.approx(1.0, abs=step)  # digits scaled to [0, 1]
    assert conv1["tracked_min_input"] == pytest.approx(-conv1["tracked_max_input"], abs=1.5 * step)
    assert relu1["tracked_max_output"] <= 6 + 1.5 * float(relu1["output_scale"])  # a ReLU6's output
    # relu1's output is conv2's input: both observers saw the same tensor
    assert relu1["tracked_max_output"] == pytest.approx(conv2["tracked_max_input"], rel=0.02)

    reloaded = load_calibration(paths[1])
    assert torch.equal(reloaded["fc1"]["weight_scale"], fc1["weight_scale"])
    assert reloaded["relu1"]["tracked_max_output"] == pytest.approx(relu1["tracked_max_output"])
    state = load_file(paths[0])
    codes = state["conv1.weight"] / conv1["weight_scale"]  # dequantized weights sit on the 8-bit grid
    assert torch.allclose(codes, codes.round(), atol=1e-3) and codes.abs().max() <= 128
    graph = onnx.load(str(paths[2])).graph
    assert [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim] == [1, 1, 8, 8]


@pytest.mark.parametrize("bits", [{"weight": 8}, 2], ids=["dict-8", "int-2"])
def test_dorefa_quantizer_trains_on_a_weight_grid(plain, digits, tmp_path, bits):
    train_batches, test_batches = digits
    quantizer = DoReFaQuantizer(plain, [{"quant_types": ["weight"], "quant_bits": bits,
                                         "op_types": ["Conv2d", "Linear"]}])
    quantizer.compress()
    _fit(plain, train_batches, torch.optim.SGD(plain.parameters(), lr=0.01, momentum=0.5))
    levels = 2 ** (bits["weight"] if isinstance(bits, dict) else bits)
    calibration = quantizer.export_model(tmp_path / "model.safetensors")
    state = load_file(tmp_path / "model.safetensors")
    for name in ("conv1", "conv2", "fc1", "fc2"):
        assert calibration[name]["weight_bits"] == (8 if levels == 256 else 2)
        assert 2 < state[f"{name}.weight"].unique().numel() <= levels, name
    assert accuracy(plain, test_batches) >= (0.85 if levels == 256 else 0.3)


def test_lsq_quantizer_learns_its_scales_and_tensorrt_points_to_slimkit(plain, digits, tmp_path):
    train_batches, test_batches = digits
    optimizer = torch.optim.SGD(plain.parameters(), lr=0.01, momentum=0.5)
    quantizer = LsqQuantizer(plain, CONV_RELU_POOL, optimizer)
    quantizer.compress()
    _fit(plain, train_batches[:1], optimizer)  # the first batch initialises the activation steps
    initial = copy.deepcopy(quantizer.calibration_config())
    _fit(plain, train_batches[1:], optimizer)
    assert accuracy(plain, test_batches) >= 0.85

    calibration = quantizer.export_model(tmp_path / "model.safetensors", tmp_path / "calibration.safetensors")
    assert sorted(calibration) == ["conv1", "conv2", "pool", "relu1", "relu2"]
    assert calibration["pool"]["output_bits"] == 8 and "tracked_max_output" in calibration["pool"]
    learned = (("conv1", "weight_scale"), ("conv1", "input_scale"), ("relu2", "output_scale"), ("pool", "output_scale"))
    for name, key in learned:
        assert not torch.allclose(calibration[name][key], initial[name][key]), (name, key)  # learned, not fixed
    with pytest.raises(ConfigError, match="ModelSpeedupTensorRT needs NVIDIA TensorRT") as refused:
        ModelSpeedupTensorRT(plain, (32, 1, 8, 8), config=calibration, batchsize=32)
    for path in ("int8_static", "onnxruntime", "int8_dynamic", "llama_cpp", "load_calibration"):
        assert path in str(refused.value)


@torch.no_grad()
def test_observer_quantizer_calibrates_on_data_then_quantizes(plain, digits, tmp_path):
    train_batches, test_batches = digits
    before = accuracy(plain, test_batches)
    quantizer = ObserverQuantizer(plain.eval(), CONV_RELU_POOL, torch.optim.SGD(plain.parameters(), lr=0.01))
    for data, _ in train_batches[:8]:  # calibration: the observers record the ranges, nothing is quantized yet
        plain(data)
    assert accuracy(plain, test_batches) == before
    quantizer.compress()
    assert accuracy(plain, test_batches) >= before - 0.03

    calibration = quantizer.export_model(tmp_path / "model.safetensors", tmp_path / "calibration.safetensors")
    assert sorted(calibration) == ["conv1", "conv2", "pool", "relu1", "relu2"]
    seen = torch.cat([data for data, _ in train_batches[:8]])
    conv1 = calibration["conv1"]
    assert conv1["tracked_min_input"] == pytest.approx(float(seen.min()), abs=1e-6)  # 0: affine grid from 0
    assert conv1["tracked_max_input"] == pytest.approx(float(seen.max()), abs=1e-6)
    assert calibration["relu1"]["tracked_min_output"] == pytest.approx(0.0, abs=1e-6)  # a ReLU's output
    assert calibration["pool"]["output_bits"] == 8
    assert load_calibration(tmp_path / "calibration.safetensors")["pool"]["output_bits"] == 8
