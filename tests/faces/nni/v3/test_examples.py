"""NNI 3.0's quantization, evaluator and fusion example flows, as our own scripts on the digits (slow tier).

Each test follows one of NNI 3.0's ``examples/compression/{quantization,evaluator,fusion}`` flows with slimkit's
import lines: the same class, signature, config keys and calls (``track_forward``, ``compress(None, epochs)``,
``from_compressor``, ``get_masks``, ``ModelSpeedup``), on a model with the layer names those configs use, and
asserts the bits, sparsity and accuracy the flow claims. The pruning examples' flows are in ``test_pruners.py``.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from slimkit.compression.base.compressor import Quantizer
from slimkit.compression.distillation import DynamicLayerwiseDistiller
from slimkit.compression.pruning import AGPPruner, TaylorPruner
from slimkit.compression.quantization import (
    BNNQuantizer,
    DoReFaQuantizer,
    LsqQuantizer,
    PtqQuantizer,
    QATQuantizer,
)
from slimkit.compression.speedup import ModelSpeedup
from slimkit.compression.utils import TorchEvaluator, auto_set_denpendency_group_ids
from slimkit.faces.nni import trace
from tests.faces.nni.digits import accuracy, train
from tests.faces.nni.v3.loop import layer_sparsity, make_training_func, training_step

pytestmark = pytest.mark.slow


class ExampleNet(nn.Module):
    """The layer names of NNI 3.0's quantization examples, sized for 8x8 digits (log-softmax output)."""

    def __init__(self, batchnorm: bool = False) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 16, 3, padding=1), nn.Conv2d(16, 32, 3, padding=1)
        self.fc1, self.fc2 = nn.Linear(32 * 4, 64), nn.Linear(64, 10)
        self.relu1, self.relu2, self.relu3 = nn.ReLU6(), nn.ReLU6(), nn.ReLU6()
        self.max_pool1, self.max_pool2 = nn.MaxPool2d(2, 2), nn.MaxPool2d(2, 2)
        self.batchnorm1 = nn.BatchNorm2d(16) if batchnorm else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.max_pool1(self.relu1(self.batchnorm1(self.conv1(x))))
        x = self.max_pool2(self.relu2(self.conv2(x)))
        x = self.relu3(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


def _pretrained(digits, batchnorm: bool = False) -> ExampleNet:
    torch.manual_seed(1024)
    return train(ExampleNet(batchnorm), digits[0], epochs=4)


def _evaluator(model, digits, lr=0.01):
    optimizer = trace(torch.optim.SGD)(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    return TorchEvaluator(make_training_func(digits[0]), optimizer, training_step,
                          evaluating_func=lambda m: accuracy(m, digits[1]))


LAYERS = {"op_names": ["conv1", "conv2", "fc1", "fc2"], "target_names": ["_input_", "weight", "_output_"],
          "quant_dtype": "int8", "quant_scheme": "affine", "granularity": "default"}
RELUS = {"op_names": ["relu1", "relu2", "relu3"], "target_names": ["_output_"], "quant_dtype": "int8",
         "quant_scheme": "affine", "granularity": "default"}


def _bits(calibration):
    return {layer: {target: info["quant_bits"] for target, info in targets.items()}
            for layer, targets in calibration.items()}


def test_qat_example_flow(digits):
    model = _pretrained(digits)
    before = accuracy(model, digits[1])
    quantizer = QATQuantizer(model, [LAYERS, RELUS], _evaluator(model, digits), len(digits[0]))
    quantizer.track_forward(digits[0][0][0])
    _, calibration = quantizer.compress(None, max_epochs=2)
    assert _bits(calibration)["conv1"] == {"_input_0": 8, "weight": 8, "_output_0": 8}
    assert _bits(calibration)["relu3"] == {"_output_0": 8}
    assert accuracy(model, digits[1]) >= before - 0.03


def test_lsq_example_flow_with_fused_batchnorm(digits):
    model = _pretrained(digits, batchnorm=True)
    before = accuracy(model, digits[1])
    config = [{"target_names": ["_input_", "weight"], "op_names": ["conv2"], "quant_dtype": "int8",
               "quant_scheme": "affine", "granularity": "default"},
              {"op_names": ["relu1", "relu2"], "target_names": ["_output_"], "quant_dtype": "int8",
               "quant_scheme": "affine", "granularity": "default"},
              {"op_names": ["max_pool2"], "target_names": ["_output_"], "quant_dtype": "int8",
               "quant_scheme": "affine", "granularity": "default"},
              {"target_names": ["_input_", "weight", "_output_"], "op_names": ["conv1"], "quant_dtype": "int8",
               "quant_scheme": "affine", "granularity": "default", "fuse_names": [("conv1", "batchnorm1")]}]
    quantizer = LsqQuantizer(model, config, _evaluator(model, digits))
    model, calibration = quantizer.compress(None, 2)
    assert isinstance(model.batchnorm1, nn.Identity) and quantizer.fused_pairs == [("conv1", "batchnorm1")]
    assert sorted(calibration) == ["conv1", "conv2", "max_pool2", "relu1", "relu2"]
    assert accuracy(model, digits[1]) >= before - 0.03


def test_ptq_example_flow(digits):
    model = _pretrained(digits)
    before = accuracy(model, digits[1])
    config = [{"target_names": ["_input_", "weight"], "op_names": ["conv2"], "quant_dtype": "int8"},
              {"op_names": ["relu1", "relu2"], "target_names": ["_output_"], "quant_dtype": "int8"},
              {"op_names": ["max_pool2"], "target_names": ["_output_"], "quant_dtype": "int8"},
              {"target_names": ["_input_", "weight", "_output_"], "op_names": ["conv1"], "quant_dtype": "int8"}]
    quantizer = PtqQuantizer(model, config, _evaluator(model, digits))
    model, calibration = quantizer.compress(None, 1)
    assert _bits(calibration)["max_pool2"] == {"_output_0": 8}
    assert accuracy(model, digits[1]) >= before - 0.05


def test_dorefa_example_flow(digits):
    model = _pretrained(digits)
    config = [{**LAYERS, "target_names": ["_input_", "weight"]}, RELUS]
    quantizer = DoReFaQuantizer(model, config, _evaluator(model, digits))
    model, calibration = quantizer.compress(None, 3)
    assert _bits(calibration)["fc1"] == {"_input_0": 8, "weight": 8}
    assert accuracy(model, digits[1]) >= 0.85


def test_bnn_example_flow(digits):
    model = _pretrained(digits)
    config = [{"op_names": ["conv2", "fc1"], "target_names": ["weight"], "quant_dtype": None},
              {"op_names": ["relu2", "relu3"], "target_names": ["_output_"], "quant_dtype": None}]
    quantizer = BNNQuantizer(model, config, _evaluator(model, digits, lr=0.005))
    model, calibration = quantizer.compress(None, 4)
    assert _bits(calibration) == {"conv2": {"weight": 1}, "relu2": {"_output_0": 1}, "fc1": {"weight": 1},
                                  "relu3": {"_output_0": 1}}
    assert accuracy(model, digits[1]) >= 0.6


def test_torch_evaluator_example_flow_prunes_with_taylor_then_speeds_up(cnn, digits, pretrained):
    evaluator = _evaluator(cnn, digits)
    config = auto_set_denpendency_group_ids(cnn, [{"op_types": ["Conv2d"], "sparse_ratio": 0.5}],
                                            torch.rand(4, 1, 8, 8))
    pruner = TaylorPruner(cnn, config, evaluator, training_steps=10)
    _, masks = pruner.compress()
    pruner.unwrap_model()
    ModelSpeedup(cnn, torch.rand(4, 1, 8, 8), masks).speedup_model()
    evaluator.bind_model(cnn)
    evaluator.train(max_steps=None, max_epochs=2)
    assert cnn.conv2.out_channels == 16 and evaluator.evaluate() >= pretrained[1] - 0.05


@pytest.mark.parametrize("with_quantizer", [False, True])
def test_fusion_example_flows_prune_distill_and_quantize(cnn, digits, with_quantizer):
    teacher = copy.deepcopy(cnn)
    dummy = torch.rand(8, 1, 8, 8)
    bn_list = [name for name, module in cnn.named_modules() if isinstance(module, nn.BatchNorm2d)]
    config = [{"op_types": ["Conv2d"], "sparse_ratio": 0.5},
              *[{"op_names": [name], "target_names": ["_output_"],
                 "target_settings": {"_output_": {"align": {"module_name": name.replace("bn", "conv"),
                                                            "target_name": "weight", "dims": [0]},
                                                  "granularity": "per_channel"}}} for name in bn_list]]
    config = auto_set_denpendency_group_ids(cnn, config, dummy)
    sub_pruner = TaylorPruner(cnn, config, _evaluator(cnn, digits), training_steps=5)
    scheduled_pruner = AGPPruner(sub_pruner, interval_steps=5, total_times=3)
    compressor = scheduled_pruner
    if with_quantizer:
        q_config = [{"op_types": ["Conv2d"], "quant_dtype": "int8", "target_names": ["_input_"],
                     "granularity": "per_channel"},
                    {"op_types": ["Conv2d"], "quant_dtype": "int8", "target_names": ["weight"],
                     "granularity": "out_channel"},
                    {"op_types": ["BatchNorm2d"], "quant_dtype": "int8", "target_names": ["_output_"],
                     "granularity": "per_channel"}]
        compressor = QATQuantizer.from_compressor(scheduled_pruner, q_config, quant_start_step=5)
    d_config = [{"op_types": ["Conv2d"], "lambda": 0.1, "apply_method": "mse"}]
    distiller = DynamicLayerwiseDistiller.from_compressor(compressor, d_config, teacher,
                                                          lambda batch, teacher_model: teacher_model(batch[0]), 0.1)
    distiller.compress(max_steps=15 + 40, max_epochs=None)
    distiller.unwrap_model()
    distiller.unwrap_teacher_model()
    masks = scheduled_pruner.get_masks()
    assert [layer_sparsity(m["weight"]) for m in masks.values()] == [0.5, 0.5]
    speedup = ModelSpeedup(cnn, dummy, masks)
    speedup.speedup_model()
    assert (cnn.conv1.out_channels, cnn.conv2.out_channels) == (8, 16)
    assert accuracy(cnn, digits[1]) >= 0.8
    if not with_quantizer:
        return
    # as NNI's example ends: the QAT calibration trimmed to the kept channels, simulated by a base Quantizer
    calibration = compressor.get_calibration_config()
    assert calibration["conv2"]["_input_0"]["scale"].shape == (1, 16, 1, 1)  # per channel, as trained
    assert calibration["bn2"]["_output_0"]["scale"].shape == (1, 32, 1, 1)
    assert calibration["conv2"]["weight"]["scale"].shape == (32, 1, 1, 1)  # as trained (the speedup left 16)
    trimmed = _trim_to_kept_channels(calibration, speedup)
    assert trimmed["conv2"]["_input_0"]["scale"].shape == (1, 8, 1, 1)
    assert trimmed["conv2"]["weight"]["scale"].shape == (16, 1, 1, 1)
    assert trimmed["bn2"]["_output_0"]["zero_point"].shape == (1, 16, 1, 1)
    before = accuracy(cnn, digits[1])
    sim_quantizer = Quantizer(cnn, q_config)
    assert accuracy(cnn, digits[1]) == before  # nothing quantized before the calibration is given
    sim_quantizer.update_calibration_config(trimmed)
    simulated = accuracy(cnn, digits[1])
    assert simulated >= before - 0.05
    x = digits[1][0][0]
    grid = trimmed["conv2"]["_input_0"]
    with torch.no_grad():  # conv2's input is put on its per-channel grids: signed int8 codes of each channel
        quantized = sim_quantizer.quantize_input(cnn.relu1(cnn.bn1(cnn.conv1(x))), cnn.conv2)
    codes = quantized / grid["scale"] + grid["zero_point"]
    assert torch.allclose(codes, codes.round(), atol=1e-3)
    assert -128 <= int(codes.round().min()) and int(codes.round().max()) <= 127
    assert float(grid["scale"].std()) > 0  # one scale per channel, not one repeated


def _trim_to_kept_channels(calibration, speedup):
    """Keep the scales of the channels the speedup kept (NNI 3.0's node_infos: output and parameter masks)."""
    def kept(mask, dim):
        return torch.nonzero(mask.sum([d for d in range(mask.dim()) if d != dim]), as_tuple=True)[0]

    out = copy.deepcopy(calibration)
    for node, info in speedup.node_infos.items():
        if node.op != "call_module" or node.target not in out:
            continue
        layer = out[node.target]
        for target, mask, dim in (("_input_0", speedup.node_infos[node.args[0]].output_masks, 1),
                                  ("_output_0", info.output_masks, 1),
                                  ("weight", info.param_masks.get("weight"), 0)):
            if target in layer and layer[target]["scale"].numel() > 1:
                index = kept(mask, dim)
                for key in ("scale", "zero_point"):
                    layer[target][key] = layer[target][key].index_select(dim, index)
    return out
