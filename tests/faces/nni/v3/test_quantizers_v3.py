"""NNI 3.0's trainable quantizers (our own 3.0-style scripts): signatures, 3.0 keys, training through the evaluator."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from slimkit.compression import QAT_Quantizer
from slimkit.compression.base.compressor import Quantizer
from slimkit.compression.quantization import (
    BNNQuantizer,
    DoReFaQuantizer,
    LsqPlusQuantizer,
    LsqQuantizer,
    PtqQuantizer,
    QATQuantizer,
)
from slimkit.engines.quantization import QATEngine, QuantizerModuleWrapper
from slimkit.engines.quantization.config import QuantizationConfigError
from slimkit.errors import ConfigError
from slimkit.faces.nni import trace
from slimkit.faces.nni.v3 import TorchEvaluator
from tests.faces.nni.digits import PlainCNN
from tests.faces.nni.v3.loop import make_training_func, training_step

LAYERS = {"op_names": ["conv1", "conv2", "fc1", "fc2"], "target_names": ["_input_", "weight"], "quant_dtype": "int8",
          "quant_scheme": "affine", "granularity": "default"}
RELUS = {"op_names": ["relu1", "relu2", "relu3"], "target_names": ["_output_"], "quant_dtype": "int8",
         "quant_scheme": "affine", "granularity": "default"}


def _evaluator(model, digits, losses=None, lr=0.01):
    optimizer = trace(torch.optim.SGD)(model.parameters(), lr=lr, momentum=0.9)
    return TorchEvaluator(make_training_func(digits[0][:3], losses), optimizer, training_step)


@pytest.mark.parametrize(("cls", "params"), [
    (QATQuantizer, ["model", "config_list", "evaluator", "quant_start_step", "existed_wrappers", "kwargs"]),
    (LsqQuantizer, ["model", "config_list", "evaluator", "existed_wrappers", "kwargs"]),
    (LsqPlusQuantizer, ["model", "config_list", "evaluator", "existed_wrappers", "kwargs"]),
    (DoReFaQuantizer, ["model", "config_list", "evaluator", "existed_wrappers", "kwargs"]),
    (BNNQuantizer, ["model", "config_list", "evaluator", "existed_wrappers", "kwargs"]),
    (PtqQuantizer, ["model", "config_list", "evaluator", "existed_wrappers", "is_bias_correction"]),
    (Quantizer, ["model", "config_list", "evaluator", "existed_wrappers"]),
])
def test_signatures_are_nni_30s(cls, params):
    assert list(inspect.signature(cls).parameters) == params
    assert callable(cls.from_compressor) and callable(cls.get_calibration_config)


def test_qat_trains_through_the_evaluator_and_reports_30_calibration(digits):
    torch.manual_seed(0)
    model, losses = PlainCNN(), []
    quantizer = QATQuantizer(model, [LAYERS, RELUS], _evaluator(model, digits, losses), quant_start_step=2)
    assert isinstance(model.conv1, QuantizerModuleWrapper) and isinstance(model.relu2, QuantizerModuleWrapper)
    quantizer.track_forward(digits[0][0][0])
    out, calibration = quantizer.compress(max_steps=3, max_epochs=None)
    assert out is model and len(losses) == 3 and quantizer.steps == 3
    assert sorted(calibration) == ["conv1", "conv2", "fc1", "fc2", "relu1", "relu2", "relu3"]
    assert sorted(calibration["conv2"]) == ["_input_0", "weight"] and sorted(calibration["relu1"]) == ["_output_0"]
    weight = calibration["conv2"]["weight"]
    assert weight["quant_bits"] == 8 and weight["quant_dtype"] == "int8" and weight["quant_scheme"] == "affine"
    assert weight["scale"].numel() == 1  # granularity "default": one scale per tensor, as NNI 3.0
    relu = calibration["relu1"]["_output_0"]
    assert float(relu["tracked_min"]) <= 0.0 < float(relu["tracked_max"]) <= 6.0 + float(relu["scale"])
    codes = torch.round(model.conv2.module.weight / weight["scale"] + weight["zero_point"])
    assert int(codes.min()) >= -128 and int(codes.max()) <= 127  # NNI 3.0's signed int8 grid
    assert int(codes.min()) == -128 or int(codes.max()) == 127  # an affine grid spans the weight's range


def test_qat_symmetric_out_channel_weights_get_one_scale_per_filter(digits):
    model = PlainCNN()
    entry = {**LAYERS, "target_names": ["weight"], "quant_scheme": "symmetric", "granularity": "out_channel"}
    _, calibration = QATQuantizer(model, [entry], _evaluator(model, digits)).compress(max_steps=1, max_epochs=None)
    scale = calibration["conv2"]["weight"]["scale"]
    assert scale.shape[0] == 16 and calibration["conv2"]["weight"]["quant_scheme"] == "symmetric"


def test_qat_keeps_nni_2x_form_beside_the_30_one():
    model, dummy = PlainCNN(), torch.randn(1, 1, 8, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    quantizer = QATQuantizer(model, [{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["Conv2d"]}],
                             optimizer, dummy)
    assert quantizer.evaluator is None and quantizer.dummy_input is dummy and quantizer.compress() is model
    assert QAT_Quantizer is QATEngine and issubclass(QATQuantizer, QATEngine)


@pytest.mark.parametrize("cls", [LsqQuantizer, LsqPlusQuantizer])
def test_lsq_step_sizes_join_the_evaluators_optimizer_and_train(digits, cls):
    torch.manual_seed(0)
    model = PlainCNN()
    evaluator = _evaluator(model, digits)
    quantizer = cls(model, [LAYERS, RELUS], evaluator)
    before = {id(p): float(p.detach()) for p in quantizer.parameters()}
    quantizer.compress(max_steps=3, max_epochs=None)
    groups = evaluator.optimizers[0].param_groups
    assert len(groups) == 2 and {id(p) for p in groups[1]["params"]} == set(before)
    # the steps (and LSQ+'s offsets) learn
    assert any(abs(float(p.detach()) - before[id(p)]) > 0 for p in quantizer.parameters())


def test_lsq_plus_offsets_follow_activations_that_are_not_centred(digits):
    torch.manual_seed(0)
    model = PlainCNN()
    entry = {"op_names": ["fc2"], "target_names": ["_output_"], "quant_dtype": "uint4"}
    quantizer = LsqPlusQuantizer(model, [entry], _evaluator(model, digits))
    _, calibration = quantizer.compress(max_steps=2, max_epochs=None)
    offset = float(model.fc2.output_offset)
    logits = quantizer.bound_model(digits[1][0][0])
    assert offset < 0 and float(logits.min()) >= offset - 1e-4  # the grid starts at the learned (negative) offset
    output = calibration["fc2"]["_output_0"]
    assert output["quant_bits"] == 4 and output["quant_dtype"] == "uint4"
    assert len(torch.unique(logits.detach())) <= 16  # 4 bits: at most 16 levels


def test_dorefa_quantizes_inputs_weights_and_outputs_as_nni_30_example_lists_them(digits):
    model = PlainCNN()
    quantizer = DoReFaQuantizer(model, [LAYERS, RELUS], _evaluator(model, digits))
    _, calibration = quantizer.compress(max_steps=1, max_epochs=None)
    assert sorted(calibration["conv1"]) == ["_input_0", "weight"]
    assert calibration["relu1"]["_output_0"]["quant_bits"] == 8
    levels = torch.unique(quantizer.quantized_weight(model.conv2) / model.conv2.module.weight.abs().max())
    assert len(levels) <= 256


def test_bnn_takes_nni_30s_quant_dtype_none_as_one_bit(digits):
    model = PlainCNN()
    config = [{"op_names": ["conv2", "fc1"], "target_names": ["weight"], "quant_dtype": None},
              {"op_names": ["relu2", "relu3"], "target_names": ["_output_"], "quant_dtype": None}]
    quantizer = BNNQuantizer(model, config, _evaluator(model, digits))
    _, calibration = quantizer.compress(max_steps=1, max_epochs=None)
    assert calibration["conv2"]["weight"]["quant_bits"] == 1 and calibration["conv2"]["weight"]["quant_dtype"] == "int1"
    signs = torch.unique(torch.sign(quantizer.quantized_weight(model.fc1)))
    assert signs.tolist() == [-1.0, 1.0]


def test_fuse_names_folds_batchnorm_into_the_conv_with_the_same_outputs(cnn, digits):
    x = digits[1][0][0]
    with torch.no_grad():
        reference = cnn.bn1(cnn.conv1(x))
    evaluator = _evaluator(cnn, digits)
    conv_weight = cnn.conv1.weight
    entry = {"op_names": ["conv1"], "target_names": ["weight"], "quant_dtype": "int8",
             "fuse_names": [("conv1", "bn1")]}
    quantizer = QATQuantizer(cnn, [entry], evaluator)
    assert quantizer.fused_pairs == [("conv1", "bn1")] and isinstance(cnn.bn1, nn.Identity)
    assert cnn.conv1.module.weight is conv_weight  # the user's optimizer still trains it
    with torch.no_grad():  # the weight the quantizer sees and the bias: conv + BatchNorm in one layer
        assert torch.allclose(F.conv2d(x, cnn.conv1.layer_weight(), cnn.conv1.module.bias, padding=1), reference,
                              atol=1e-4)
    quantizer.unwrap_model()  # NNI's unwrap: the layer and its BatchNorm come back as they were
    assert type(cnn.conv1) is nn.Conv2d and cnn.conv1.weight is conv_weight and isinstance(cnn.bn1, nn.BatchNorm2d)
    with torch.no_grad():
        assert torch.equal(cnn.bn1(cnn.conv1(x)), reference)


def test_fused_layers_follow_the_batchnorm_statistics_as_qat_trains(cnn, digits):
    bn = cnn.bn2
    before_mean, tracked = bn.running_mean.clone(), int(bn.num_batches_tracked)
    entry = {"op_names": ["conv2"], "target_names": ["weight"], "quant_dtype": "int8",
             "fuse_names": [("conv2", "bn2")]}
    quantizer = QATQuantizer(cnn, [entry], _evaluator(cnn, digits))
    quantizer.compress(max_steps=3, max_epochs=None)
    assert int(bn.num_batches_tracked) == tracked + 3  # one update per training forward, as NNI 3.0's fusion
    assert not torch.allclose(bn.running_mean, before_mean)
    conv = cnn.conv2.module
    factor = bn.weight * torch.rsqrt(bn.running_var + bn.eps)  # the statistics as they are now
    with torch.no_grad():
        folded = cnn.conv2.layer_weight()
        assert torch.allclose(folded, conv.weight * factor[:, None, None, None])
        assert torch.allclose(conv.bias, (conv.parametrizations.bias.original - bn.running_mean) * factor + bn.bias)
    calibration = quantizer.get_calibration_config()
    codes = torch.round(folded / calibration["conv2"]["weight"]["scale"] + calibration["conv2"]["weight"]["zero_point"])
    assert -128 <= int(codes.min()) and int(codes.max()) <= 127  # the scale is the folded weight's
    assert int(codes.min()) == -128 or int(codes.max()) == 127
    quantizer.freeze()  # integer codes of the folded weight; the BatchNorm's place: Identity for good
    assert type(cnn.bn2) is nn.Identity and cnn.conv2.state_dict()["weight_codes"].dtype == torch.uint8


def test_fuse_names_folds_linear_and_batchnorm1d():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4), nn.ReLU())
    model.train()
    model(torch.randn(32, 6) * 3 + 1)  # running statistics away from (0, 1)
    model.eval()
    x = torch.randn(5, 6)
    reference = model(x).detach()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    evaluator = TorchEvaluator(make_training_func([]), optimizer, training_step)
    quantizer = PtqQuantizer(model, [{"op_names": ["0"], "target_names": ["weight"], "quant_dtype": "int8",
                                      "fuse_names": [["0", "1"]]}], evaluator)
    assert isinstance(model[1], nn.Identity)
    with torch.no_grad():
        assert torch.allclose(F.linear(x, model[0].layer_weight(), model[0].module.bias).relu(), reference, atol=1e-5)
    quantizer.unwrap_model()
    assert isinstance(model[1], nn.BatchNorm1d) and torch.allclose(model(x), reference, atol=1e-6)


@pytest.mark.parametrize(("entry", "message"), [
    ({**LAYERS, "granularity": "per_channel"}, "'per_channel' of '_input_': this quantizer keeps one scale per "
                                                "activation tensor; QATQuantizer"),
    ({**LAYERS, "target_names": ["_output_"], "granularity": "in_channel"},
     "'_output_' must be 'default', 'per_tensor' or 'per_channel'.*'in_channel' are for weights"),
    ({**LAYERS, "target_names": ["weight"], "granularity": "in_channel"}, "keeps one scale per weight tensor"),
    ({**LAYERS, "quant_dtype": "fp8"}, "'int<bits>' or 'uint<bits>'"),
    ({**LAYERS, "fuse_names": [("conv1", "relu1")]}, "fuses a Conv/Linear with the BatchNorm"),
    ({**LAYERS, "fuse_names": [("conv1", "bn9")]}, "'bn9' is no layer of the model"),
    ({**LAYERS, "target_names": ["_input_", "bias"]}, "must list some of weight, _input_, _output_"),
    ({**LAYERS, "quant_types": ["weight"]}, "unknown key 'quant_types'"),
])
def test_bad_30_keys_are_refused_clearly(cnn, digits, entry, message):
    with pytest.raises(QuantizationConfigError, match=message):
        LsqQuantizer(cnn, [entry], _evaluator(cnn, digits))


def test_an_entry_selecting_nothing_is_skipped_with_a_warning(digits):
    model = PlainCNN()
    missing = {"op_types": ["ReLU"], "target_names": ["_output_"], "quant_dtype": "int8"}  # PlainCNN has ReLU6
    with pytest.warns(UserWarning, match=r"config_list\[1\] selects no layer of the model; it is skipped"):
        quantizer = QATQuantizer(model, [LAYERS, missing], _evaluator(model, digits))
    assert sorted(w.name for w in quantizer.get_modules_wrapper()) == ["conv1", "conv2", "fc1", "fc2"]


def test_compress_without_a_duration_and_wrong_evaluators_are_refused(digits):
    model = PlainCNN()
    with pytest.raises(QuantizationConfigError, match="got unexpected argument.*NNI 3.0's form"):
        QATQuantizer(model, [LAYERS], None, max_steps=3)
    quantizer = QATQuantizer(model, [LAYERS], _evaluator(model, digits))
    with pytest.raises(ConfigError, match="needs max_steps or max_epochs"):
        quantizer.compress()


def test_tensorrt_speedup_imports_and_names_the_cpu_paths_when_built():
    from slimkit.compression.quantization_speedup import ModelSpeedupTensorRT

    with pytest.raises(ConfigError, match="ONNX Runtime int8.*llama_cpp"):
        ModelSpeedupTensorRT(PlainCNN(), (1, 1, 8, 8), config={}, batchsize=1)
