"""NNI 3.0-style post-training quantization on the digits: calibrated through the evaluator, frozen to int8."""

from __future__ import annotations

import pytest
import torch

from slimkit.engines.quantization.config import QuantizationConfigError
from slimkit.faces.nni import trace
from slimkit.faces.nni.v3 import TorchEvaluator
from slimkit.faces.nni.v3.quantization import PtqQuantizer
from tests.faces.nni.digits import accuracy
from tests.faces.nni.v3.loop import make_evaluator, make_training_func, training_step

CONFIG = [{"op_types": ["Conv2d", "Linear"], "exclude_op_names": ["fc2"],
           "target_names": ["_input_", "weight", "_output_"], "quant_dtype": "int8", "quant_scheme": "affine",
           "granularity": "default"},
          {"op_names": ["fc2"], "target_names": ["weight"], "target_settings": {"weight": {"quant_dtype": "int4"}}}]


def test_ptq_calibrates_through_the_evaluator_and_freezes_to_integer_codes(cnn, digits, pretrained):
    quantizer = PtqQuantizer(cnn, CONFIG, make_evaluator(cnn, digits))
    model, calibration = quantizer.compress()
    assert sorted(calibration) == ["conv1", "conv2", "fc1", "fc2"]
    assert calibration["conv1"]["_input_0"]["quant_bits"] == calibration["conv1"]["weight"]["quant_bits"] == 8
    assert calibration["fc2"]["weight"]["quant_bits"] == 4 and "_input_0" not in calibration["fc2"]
    assert calibration["fc2"]["weight"]["quant_dtype"] == "int4"
    low, high = calibration["conv1"]["_input_0"]["tracked_min"], calibration["conv1"]["_input_0"]["tracked_max"]
    assert low <= float(torch.cat([x for x, _ in digits[1]]).min()) and high > 0
    fake_quantized = accuracy(model, digits[1])
    assert fake_quantized >= pretrained[1] - 0.05
    quantizer.freeze()
    codes = model.conv1.state_dict()["weight_codes"]
    assert codes.dtype == torch.uint8 and tuple(codes.shape) == (16, 1, 3, 3)
    assert accuracy(model, digits[1]) == pytest.approx(fake_quantized, abs=0.02)


def test_entries_add_targets_to_a_layer_and_the_first_setting_of_a_target_is_kept(cnn, digits):
    config = [{"op_names": ["fc2"], "target_names": ["_input_"], "quant_dtype": "uint8"},
              {"op_types": ["Linear"], "target_names": ["weight", "_input_"], "quant_dtype": "int4"}]
    with pytest.warns(UserWarning, match=r"config_list\[1\] sets input of 'fc2', which an earlier entry set"):
        quantizer = PtqQuantizer(cnn, config, make_evaluator(cnn, digits))
    _, calibration = quantizer.compress()
    assert {t: (c["quant_bits"], c["quant_dtype"]) for t, c in calibration["fc2"].items()} == \
        {"_input_0": (8, "uint8"), "weight": (4, "int4")}
    assert sorted(calibration["fc1"]) == ["_input_0", "weight"]


def test_ptq_can_observe_while_the_evaluator_trains(cnn, digits):
    losses = []
    optimizer = trace(torch.optim.SGD)(cnn.parameters(), lr=0.001)
    evaluator = TorchEvaluator(make_training_func(digits[0], losses), optimizer, training_step)
    quantizer = PtqQuantizer(cnn, CONFIG[:1], evaluator)
    with pytest.raises(QuantizationConfigError, match="evaluating_func, or compress"):
        quantizer.compress()
    _, calibration = quantizer.compress(max_steps=3, max_epochs=None)
    assert len(losses) == 3 and calibration["fc1"]["_output_0"]["quant_bits"] == 8


@pytest.mark.parametrize(("entry", "message"), [
    ({"op_names": ["fc1"], "target_names": ["weight"], "quant_dtype": "int8", "fuse_names": [["fc1"]]},
     "fuse_names.*names a layer and the BatchNorm after it"),
    ({"op_names": ["fc1"], "target_names": ["weight"], "quant_dtype": "int8", "fuse_names": [["conv1", "bn1"]]},
     "fused layer 'conv1' must be one of the entry's op_names"),
    ({"op_types": ["Linear"], "target_names": ["weight"], "quant_dtype": "int8", "granularity": "per_channel"},
     "granularity of 'weight'.*keeps one scale per weight tensor"),
    ({"op_types": ["Linear"], "target_names": ["_input_"], "quant_dtype": "int8", "granularity": "per_channel"},
     "keeps one scale per activation tensor; QATQuantizer"),
    ({"op_types": ["Linear"], "target_names": ["weight"], "quant_dtype": "float8"}, "'int<bits>' or 'uint<bits>'"),
    ({"op_types": ["Linear"], "target_names": ["_input_0"], "quant_dtype": "int8"}, "weight, _input_, _output_"),
    ({"op_types": ["Linear"], "target_names": ["weight"], "quant_dtyp": "int8"}, "Did you mean 'quant_dtype'"),
])
def test_bad_quantization_keys_are_refused_clearly(cnn, digits, entry, message):
    with pytest.raises(QuantizationConfigError, match=message):
        PtqQuantizer(cnn, [entry], make_evaluator(cnn, digits))
