"""The Quantizer framework: wrapping, wrapper attributes, export/calibration round-trip, freezing, devices."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from slimkit.engines.pruning import load_state_dict_file
from slimkit.engines.quantization import (
    BNNEngine,
    ClipGrad,
    DoReFaEngine,
    LsqEngine,
    QATEngine,
    QuantizedLayer,
    Quantizer,
    QuantizerModuleWrapper,
    QuantType,
    dequantize,
    fake_quantize,
    load_calibration,
    quantize_codes,
    quantized_layer_specs,
    rebuild_quantized_layers,
)
from slimkit.engines.quantization.config import QuantizationConfigError
from slimkit.errors import SaveLoadError

CONFIG = [
    {"quant_types": ["weight", "input", "output"], "quant_bits": {"weight": 8, "input": 8, "output": 6},
     "op_types": ["default"]},
    {"exclude": True, "op_names": ["head"]},
]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(1, 4, 3)
        self.act = nn.ReLU()
        self.flat = nn.Flatten()
        self.fc = nn.Linear(4 * 6 * 6, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(torch.relu(self.fc(self.flat(self.act(self.conv(x))))))


def _x(n=16):
    return torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(2))


def _calibrated(cls=QATEngine, config=CONFIG, **kwargs):
    model = Net()
    quantizer = cls(model, config, **kwargs)
    model.train()
    model(_x())
    model.eval()
    return model, quantizer


def test_wrapping_keeps_the_original_layers_and_unwrap_restores_them():
    model = Net()
    conv = model.conv
    quantizer = Quantizer(model, CONFIG)
    assert isinstance(model.conv, QuantizerModuleWrapper) and model.conv.module is conv
    assert isinstance(model.head, nn.Linear)  # excluded
    assert [w.name for w in quantizer.get_modules_wrapper()] == ["conv", "fc"]
    assert "bits=(weight=8, input=8, output=6)" in repr(model.conv)
    torch.testing.assert_close(model(_x()), Net()(_x()))  # the base class quantizes nothing
    assert quantizer.compress() is model
    quantizer.unwrap_model()
    assert model.conv is conv


def test_set_wrappers_attribute_gives_each_wrapper_its_own_copy():
    model = Net()
    quantizer = Quantizer(model, CONFIG)
    quantizer.set_wrappers_attribute("calls", [])
    quantizer.set_wrappers_attribute("counter", torch.zeros(2))
    first, second = quantizer.modules_wrapper
    first.calls.append(1)
    first.counter += 1
    assert second.calls == [] and torch.equal(second.counter, torch.zeros(2))
    assert "counter" in dict(first.named_buffers())


def test_export_model_round_trips_scales_zero_points_and_weights(tmp_path):
    model, quantizer = _calibrated()
    expected = quantizer.calibration_config()
    returned = quantizer.export_model(tmp_path / "model.safetensors", tmp_path / "calibration.safetensors")
    loaded = load_calibration(tmp_path / "calibration.safetensors")
    assert sorted(loaded) == ["conv", "fc"] and sorted(loaded) == sorted(expected)
    for layer, fields in expected.items():
        assert sorted(loaded[layer]) == sorted(fields)
        assert loaded[layer]["output_bits"] == 6 and loaded[layer]["weight_bits"] == 8
        for key, value in fields.items():
            if key.endswith("_bits") or key.startswith("tracked_"):  # ints and NNI 2.x's float ranges
                assert loaded[layer][key] == pytest.approx(value) and value == returned[layer][key]
            else:
                assert torch.equal(loaded[layer][key], value)
    assert loaded["conv"]["weight_scale"].shape == (4, 1, 1, 1)  # per output channel

    state = load_state_dict_file(tmp_path / "model.safetensors")
    assert sorted(state) == sorted(Net().state_dict())  # a plain, unwrapped state dict
    fresh = Net()
    fresh.load_state_dict(state)
    for layer in ("conv", "fc"):
        weight = state[f"{layer}.weight"]
        scale, zero_point = loaded[layer]["weight_scale"], loaded[layer]["weight_zero_point"]
        codes = quantize_codes(weight, scale, zero_point, 8)
        torch.testing.assert_close(dequantize(codes, scale, zero_point), weight, rtol=0, atol=1e-6)
    assert torch.equal(state["head.weight"], model.head.weight.detach())  # excluded: unchanged


def test_calibration_file_errors(tmp_path):
    with pytest.raises(SaveLoadError, match="does not exist"):
        load_calibration(tmp_path / "missing.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(SaveLoadError, match="not a readable safetensors file"):
        load_calibration(tmp_path / "junk.safetensors")
    model, quantizer = _calibrated()
    quantizer.export_model(tmp_path / "model.safetensors")
    with pytest.raises(SaveLoadError, match="not a quantization calibration file"):
        load_calibration(tmp_path / "model.safetensors")
    save_file({"conv.weight_sale": torch.ones(1)}, str(tmp_path / "odd.safetensors"),
              metadata={"format": "slimkit-quant-calibration"})
    with pytest.raises(SaveLoadError, match="unexpected key 'conv.weight_sale'"):
        load_calibration(tmp_path / "odd.safetensors")


@pytest.mark.parametrize(
    ("cls", "config", "kwargs"),
    [
        (QATEngine, CONFIG, {}),
        (LsqEngine, CONFIG, {}),
        (DoReFaEngine, [{"quant_types": ["weight", "output"], "quant_bits": 4}], {}),
        (BNNEngine, [{"quant_types": ["weight"], "quant_bits": 1}, {"quant_types": ["output"], "quant_bits": 1,
                                                                        "op_names": ["act"]}], {}),
    ],
)
def test_freeze_reproduces_the_quantized_forward_and_reloads_exactly(cls, config, kwargs):
    model, quantizer = _calibrated(cls, config, **kwargs)
    x = _x()
    with torch.no_grad():
        before = model(x)
    quantizer.freeze()
    assert not any(isinstance(m, QuantizerModuleWrapper) for m in model.modules())
    with torch.no_grad():
        after = model(x)
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-5)
    state = model.state_dict()
    assert all(not k.endswith(".module.weight") for k in state if k.startswith(("conv", "fc")))
    assert state["conv.weight_codes"].dtype == torch.uint8

    specs = quantized_layer_specs(model)
    fresh = rebuild_quantized_layers(Net(), specs)
    fresh.load_state_dict(state, strict=True)
    fresh.eval()
    with torch.no_grad():
        assert torch.equal(fresh(x), after)
    assert isinstance(fresh.conv, QuantizedLayer) and fresh.conv.spec() == model.conv.spec()


def test_freeze_needs_observed_activations_and_rebuild_needs_the_layers():
    model = Net()
    quantizer = QATEngine(model, CONFIG)
    with pytest.raises(QuantizationConfigError, match="has no input scale yet; run training or calibration"):
        quantizer.freeze()
    with pytest.raises(QuantizationConfigError, match="Cannot rebuild quantized layer 'encoder.fc'"):
        rebuild_quantized_layers(Net(), {"encoder.fc": {"bits": {"weight": 8}, "shapes": {}}})


def test_onnx_export_of_the_dequantized_model(tmp_path):
    import onnxruntime
    model, quantizer = _calibrated(config=[{"quant_types": ["weight"], "quant_bits": 4}])
    with pytest.raises(QuantizationConfigError, match="needs input_shape"):
        quantizer.export_model(tmp_path / "m.safetensors", onnx_path=tmp_path / "m.onnx")
    quantizer.export_model(tmp_path / "m.safetensors", onnx_path=tmp_path / "m.onnx", input_shape=(2, 1, 8, 8))
    plain = Net()
    plain.load_state_dict(load_state_dict_file(tmp_path / "m.safetensors"))
    session = onnxruntime.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    x = _x(2)
    (out,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    torch.testing.assert_close(torch.from_numpy(out), plain.eval()(x).detach(), rtol=1e-4, atol=1e-5)
    assert isinstance(model.conv, QuantizerModuleWrapper)  # exporting left the quantizer attached


@pytest.mark.cuda
def test_quantizers_run_and_freeze_on_cuda():
    binary = [{"quant_types": ["weight"], "quant_bits": 1}, {"quant_types": ["output"], "quant_bits": 1,
                                                             "op_names": ["act"]}]
    for cls, config in ((QATEngine, CONFIG), (LsqEngine, CONFIG), (BNNEngine, binary)):
        model = Net().cuda()
        quantizer = cls(model, config)
        model.train()
        model(_x().cuda()).sum().backward()
        assert model.conv.weight_scale.device.type == "cuda"
        quantizer.freeze()
        assert model.conv.weight_codes.device.type == "cuda"
        assert all(b.device.type == "cuda" for b in model.buffers())  # parameter-free layers too
        assert model.eval()(_x().cuda()).shape == (16, 3)


def test_custom_quantizer_as_in_the_nni_guide():
    """A user quantizer: override quantize_weight/quantize_output, set quant_grad, count steps and epochs."""

    class HalfClip(ClipGrad):
        @staticmethod
        def quant_backward(tensor, grad_output, quant_type, scale, zero_point, qmin, qmax):
            grad = ClipGrad.quant_backward(tensor, grad_output, quant_type, scale, zero_point, qmin, qmax)
            return grad * 0.5 if quant_type == QuantType.QUANT_OUTPUT else grad

    class SignQuantizer(Quantizer):
        def __init__(self, model, config_list, optimizer=None):
            super().__init__(model, config_list, optimizer)
            self.quant_grad = HalfClip
            self.epochs_seen = []

        def _init_wrapper(self, wrapper):
            wrapper.register_buffer("output_scale", torch.tensor([1.0]))
            wrapper.register_buffer("output_zero_point", torch.tensor([1.0]))

        def quantize_weight(self, weight, wrapper, **kwargs):
            return torch.sign(weight) * weight.abs().mean()

        def quantize_output(self, output, wrapper, **kwargs):
            bits = wrapper.config["quant_bits"]["output"]
            return fake_quantize(output, wrapper.output_scale, wrapper.output_zero_point, bits)

        def update_epoch(self, epoch):
            super().update_epoch(epoch)
            self.epochs_seen.append(epoch)

    model = nn.Sequential(nn.Linear(4, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    quantizer = SignQuantizer(model, [{"quant_types": ["weight", "output"], "quant_bits": 2}], optimizer)
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    for epoch in range(2):
        quantizer.update_epoch(epoch)
        out = model(x)
        assert set(out.detach().unique().tolist()) <= {-1.0, 0.0, 1.0, 2.0}  # codes 0..3, zero point 1
        out.sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    assert quantizer.steps == 2 and quantizer.epochs_seen == [0, 1]
    layer = quantizer.modules_wrapper[0].module
    assert torch.unique(quantizer.quantized_weight(quantizer.modules_wrapper[0]).abs()).numel() == 1
    model(x).sum().backward()
    pre = x @ (torch.sign(layer.weight) * layer.weight.abs().mean()).detach().T + layer.bias.detach()
    inside = ((torch.round(pre + 1) >= 0) & (torch.round(pre + 1) <= 3)).float()
    torch.testing.assert_close(layer.bias.grad, (inside * 0.5).sum(0))  # halved, zero where clamped
