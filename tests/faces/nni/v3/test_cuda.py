"""NNI 3.0's quantizers, fusion and a prune + quantize + distill chain on a CUDA GPU (skipped without one)."""

from __future__ import annotations

import copy

import pytest
import torch

from slimkit.compression.distillation import DynamicLayerwiseDistiller
from slimkit.compression.pruning import L1NormPruner
from slimkit.compression.quantization import LsqPlusQuantizer, QATQuantizer
from slimkit.compression.utils import TorchEvaluator
from slimkit.faces.nni import trace
from tests.faces.nni.digits import DigitCNN
from tests.faces.nni.v3.loop import make_training_func, training_step

pytestmark = pytest.mark.cuda

CONFIG = [{"op_types": ["Conv2d", "Linear"], "target_names": ["_input_", "weight"], "quant_dtype": "int8"},
          {"op_names": ["conv1"], "target_names": ["weight"], "quant_dtype": "int8", "fuse_names": [("conv1", "bn1")]}]


def _setup(digits):
    torch.manual_seed(0)
    model = DigitCNN().cuda()
    batches = [(x.cuda(), y.cuda()) for x, y in digits[0][:3]]
    model.train()
    model(batches[0][0])  # running statistics for the fusion
    optimizer = trace(torch.optim.SGD)(model.parameters(), lr=0.01, momentum=0.9)
    return model, batches, TorchEvaluator(make_training_func(batches), optimizer, training_step)


@pytest.mark.parametrize("cls", [QATQuantizer, LsqPlusQuantizer])
def test_30_quantizers_train_and_calibrate_on_cuda(digits, cls):
    model, batches, evaluator = _setup(digits)
    config = CONFIG if cls is QATQuantizer else [{**CONFIG[0], "quant_scheme": "affine"}, CONFIG[1]]
    _, calibration = cls(model, config, evaluator).compress(max_steps=3, max_epochs=None)
    assert calibration["fc1"]["weight"]["quant_bits"] == 8 and calibration["conv1"]["weight"]["scale"].is_cpu
    assert model(batches[0][0]).is_cuda


def test_prune_quantize_distill_chain_on_cuda(digits):
    model, batches, evaluator = _setup(digits)
    teacher = copy.deepcopy(model)
    pruner = L1NormPruner(model, [{"op_types": ["Conv2d"], "sparse_ratio": 0.5}])
    quantizer = QATQuantizer.from_compressor(pruner, CONFIG[:1], evaluator=evaluator)
    distiller = DynamicLayerwiseDistiller.from_compressor(quantizer, [{"op_names": ["fc2"], "apply_method": "kl"}],
                                                          teacher, lambda batch, t: t(batch[0]))
    distiller.compress(max_steps=3, max_epochs=None)
    weights = model.conv1.module.weight
    assert weights.is_cuda and int(weights.flatten(1).abs().sum(1).eq(0).sum()) == 8
