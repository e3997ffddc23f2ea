"""NNI 3.0's base ``Quantizer`` + ``update_calibration_config``, per-channel activations and ``node_infos``.

Our own 3.0-style scripts: a QATQuantizer trains per-channel input grids, its calibration config is handed to the
base ``Quantizer`` of ``slimkit.compression.base.compressor`` (as NNI 3.0's fusion example ends), and
``ModelSpeedup.node_infos`` says which channels a speedup kept.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from slimkit.compression.base.compressor import Quantizer
from slimkit.compression.pruning import L1NormPruner
from slimkit.compression.quantization import QATQuantizer
from slimkit.compression.speedup import ModelSpeedup
from slimkit.engines.quantization.config import QuantizationConfigError
from slimkit.engines.quantization.frozen import QuantizedLayer
from slimkit.engines.speedup import SpeedupError
from tests.faces.nni.digits import PlainCNN
from tests.faces.nni.v3.loop import make_evaluator

CONFIG = [{"op_names": ["conv2"], "target_names": ["_input_"], "quant_dtype": "int8", "granularity": "per_channel"},
          {"op_names": ["conv2", "fc1"], "target_names": ["weight"], "quant_dtype": "int8",
           "granularity": "out_channel"},
          {"op_names": ["fc1"], "target_names": ["_output_"], "quant_dtype": "uint8"}]


def _trained_qat(digits):
    torch.manual_seed(0)
    model = PlainCNN()
    quantizer = QATQuantizer(model, CONFIG, make_evaluator(model, digits))
    seen = {}
    model.conv2.register_forward_pre_hook(lambda wrapper, args: seen.update(x=args[0].detach()))
    quantizer.track_forward(digits[0][0][0])  # one training-mode batch: the ranges are that batch's
    return model, quantizer, seen["x"]


def test_qat_tracks_one_input_range_per_channel(digits):
    model, quantizer, x = _trained_qat(digits)
    assert torch.equal(model.conv2.input_tracked_max.flatten(), x.amax(dim=(0, 2, 3)))
    assert torch.equal(model.conv2.input_tracked_min.flatten(), x.amin(dim=(0, 2, 3)))
    calibration = quantizer.get_calibration_config()
    grid = calibration["conv2"]["_input_0"]
    assert grid["scale"].shape == grid["zero_point"].shape == grid["tracked_max"].shape == (1, 8, 1, 1)
    assert torch.allclose(grid["tracked_max"].flatten(), x.amax(dim=(0, 2, 3)).clamp(min=0), rtol=0.01, atol=1e-4)
    assert float(grid["scale"].flatten().std()) > 0
    assert calibration["conv2"]["weight"]["scale"].shape == (16, 1, 1, 1)
    assert calibration["fc1"]["_output_0"]["scale"].shape == (1,)  # per tensor where granularity is default
    assert calibration["fc1"]["_output_0"]["quant_dtype"] == "uint8"
    assert 0 <= int(calibration["fc1"]["_output_0"]["zero_point"]) <= 255  # uint8: unsigned, as NNI 3.0
    assert -128 <= int(calibration["conv2"]["_input_0"]["zero_point"].min())  # int8: signed


def test_per_channel_inputs_freeze_and_export_with_their_shapes(digits, tmp_path):
    from slimkit.engines.quantization.io import load_calibration

    model, quantizer, _ = _trained_qat(digits)
    model.eval()
    x = digits[1][0][0]
    with torch.no_grad():
        reference = model(x)
    saved = quantizer.export_model(tmp_path / "model.safetensors", tmp_path / "calibration.safetensors")
    assert load_calibration(tmp_path / "calibration.safetensors")["conv2"]["input_scale"].shape == (1, 8, 1, 1)
    assert saved["conv2"]["input_scale"].shape == (1, 8, 1, 1)
    quantizer.freeze()
    assert isinstance(model.conv2, QuantizedLayer) and model.conv2.input_scale.shape == (1, 8, 1, 1)
    with torch.no_grad():
        assert torch.allclose(model(x), reference, atol=1e-5)


def test_base_quantizer_simulates_the_calibration_a_qat_quantizer_trained(digits):
    model, quantizer, _ = _trained_qat(digits)
    model.eval()
    x = digits[1][0][0]
    with torch.no_grad():
        reference = model(x)
    quantizer.unwrap_model()
    calibration = quantizer.get_calibration_config()
    with torch.no_grad():
        plain = model(x)
    simulator = Quantizer(model, CONFIG)
    assert isinstance(model.conv2, nn.Module) and type(model.conv2).__name__ == "QuantizerModuleWrapper"
    with torch.no_grad():
        assert torch.equal(model(x), plain)  # nothing is quantized before the calibration is given
    simulator.update_calibration_config(calibration)
    with torch.no_grad():
        simulated = model(x)
    assert torch.allclose(simulated, reference, atol=1e-5) and not torch.equal(simulated, plain)
    again = simulator.get_calibration_config()
    assert torch.equal(again["conv2"]["_input_0"]["zero_point"], calibration["conv2"]["_input_0"]["zero_point"])


@pytest.mark.parametrize(("layer", "target", "change", "message"), [
    ("fc2", "weight", {}, "'fc2' is not a layer this Quantizer quantizes"),
    ("fc1", "_input_0", {}, "quantizes weight, _output_0 of this layer; '_input_0' is not among them"),
    ("conv2", "weight", {"quant_bits": 4}, "quant_bits is 4 but this Quantizer's config_list gives 8"),
    ("conv2", "weight", {"quant_dtype": "uint8"}, "quant_dtype is 'uint8' but"),
])
def test_update_calibration_config_refuses_what_the_config_list_does_not_quantize(digits, layer, target, change,
                                                                                   message):
    model, quantizer, _ = _trained_qat(digits)
    quantizer.unwrap_model()
    given = quantizer.get_calibration_config()
    info = {**given.get(layer, given["conv2"]).get(target, given["conv2"]["weight"]), **change}
    simulator = Quantizer(model, CONFIG)
    with pytest.raises(QuantizationConfigError, match=message):
        simulator.update_calibration_config({layer: {target: info}})


def test_untrimmed_channel_scales_are_refused_at_the_forward(digits):
    model, quantizer, _ = _trained_qat(digits)
    quantizer.unwrap_model()
    calibration = quantizer.get_calibration_config()
    calibration["conv2"]["_input_0"]["scale"] = calibration["conv2"]["_input_0"]["scale"][:, :6]
    calibration["conv2"]["_input_0"]["zero_point"] = calibration["conv2"]["_input_0"]["zero_point"][:, :6]
    Quantizer(model, CONFIG).update_calibration_config(calibration)
    with pytest.raises(QuantizationConfigError, match="gives 6 channel scales.*trim the config"):
        model(digits[1][0][0])


def test_node_infos_say_which_channels_the_speedup_kept():
    torch.manual_seed(0)
    model = PlainCNN()
    pruner = L1NormPruner(model, [{"op_names": ["conv1"], "sparse_ratio": 0.5}])
    _, masks = pruner.compress()
    pruner.unwrap_model()
    kept = torch.nonzero(masks["conv1"]["weight"].sum((1, 2, 3)), as_tuple=True)[0]
    speedup = ModelSpeedup(model, torch.rand(2, 1, 8, 8), masks)
    with pytest.raises(SpeedupError, match="filled by speedup_model"):
        speedup.node_infos  # noqa: B018
    speedup.speedup_model()
    infos = {node.target: (node, info) for node, info in speedup.node_infos.items() if node.op == "call_module"}
    conv1, relu1, conv2 = infos["conv1"][1], infos["relu1"][1], infos["conv2"]
    assert torch.equal(torch.nonzero(conv1.output_masks.sum((0, 2, 3)), as_tuple=True)[0], kept)
    assert conv1.output_masks.shape == (2, 8, 8, 8) and torch.equal(relu1.output_masks, conv1.output_masks)
    assert torch.equal(speedup.node_infos[conv2[0].args[0]].output_masks, relu1.output_masks)
    assert conv1.param_masks["weight"].shape == (8, 1, 3, 3) and int(conv1.param_masks["bias"].sum()) == 4
    assert torch.equal(torch.nonzero(conv2[1].param_masks["weight"].sum((0, 2, 3)), as_tuple=True)[0], kept)
    assert float(conv2[1].output_masks.min()) == 1.0  # conv2 keeps all its filters
