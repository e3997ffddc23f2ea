"""NNI 3.0's ``from_compressor`` chaining (our own script in the shape of its fusion examples): prune, quantize and
distill one digits CNN, then speed it up."""

from __future__ import annotations

import copy

import pytest
import torch

from slimkit.compression import TorchEvaluator
from slimkit.compression.distillation import DynamicLayerwiseDistiller
from slimkit.compression.pruning import AGPPruner, L1NormPruner, TaylorPruner
from slimkit.compression.quantization import QATQuantizer
from slimkit.compression.speedup import ModelSpeedup
from slimkit.compression.utils import auto_set_denpendency_group_ids
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.quantization import QuantizerModuleWrapper
from slimkit.engines.speedup import SpeedupError
from slimkit.errors import ConfigError
from slimkit.faces.nni import trace
from tests.faces.nni.digits import accuracy, kept_channels
from tests.faces.nni.v3.loop import layer_sparsity, make_training_func, training_step

DUMMY = torch.rand(2, 1, 8, 8)
Q_CONFIG = [{"op_types": ["Conv2d"], "quant_dtype": "int8", "target_names": ["_input_", "weight"]},
            {"op_types": ["Linear"], "quant_dtype": "int8", "target_names": ["weight"]}]
D_CONFIG = [{"op_types": ["Conv2d"], "lambda": 0.1, "apply_method": "mse"}]


def _evaluator(model, digits, losses):
    optimizer = trace(torch.optim.SGD)(model.parameters(), lr=0.01, momentum=0.9)
    return TorchEvaluator(make_training_func(digits[0][:4], losses), optimizer, training_step)


def test_prune_quantize_distill_chain_runs_each_part_and_keeps_the_masks(cnn, digits):
    teacher, losses = copy.deepcopy(cnn), []
    config = auto_set_denpendency_group_ids(cnn, [{"op_types": ["Conv2d"], "sparse_ratio": 0.5}], DUMMY)
    sub = TaylorPruner(cnn, config, _evaluator(cnn, digits, losses), training_steps=1)
    scheduled = AGPPruner(sub, interval_steps=2, total_times=2)
    quantizer = QATQuantizer.from_compressor(scheduled, Q_CONFIG, quant_start_step=1)
    distiller = DynamicLayerwiseDistiller.from_compressor(quantizer, D_CONFIG, teacher,
                                                          lambda batch, model: model(batch[0]), 0.1)
    assert distiller.chain() == [scheduled, quantizer, distiller] and distiller.evaluator is sub.evaluator
    distiller.compress(max_steps=7, max_epochs=None)
    assert len(losses) == 7  # 2 rounds x 2 steps of AGP (Taylor's statistics inside), then 3 joint steps
    assert quantizer.steps == 3 and isinstance(cnn.conv2, QuantizerModuleWrapper)
    masks = scheduled.get_masks()
    assert {name: layer_sparsity(m["weight"]) for name, m in masks.items()} == {"conv1": 0.5, "conv2": 0.5}
    weights = cnn.conv2.module.weight.detach()
    assert float(weights[[i for i in range(32) if i not in kept_channels(masks["conv2"]["weight"])]].abs().max()) == 0
    calibration = quantizer.get_calibration_config()
    assert calibration["conv2"]["weight"]["quant_bits"] == calibration["fc1"]["weight"]["quant_bits"] == 8
    distiller.unwrap_model()
    distiller.unwrap_teacher_model()
    ModelSpeedup(cnn, DUMMY, masks).speedup_model()
    assert (cnn.conv1.out_channels, cnn.conv2.out_channels, cnn.fc1.in_features) == (8, 16, 256)
    assert accuracy(cnn, digits[1]) > 0.3


def test_one_shot_pruner_chains_with_a_quantizer_given_the_evaluator(cnn, digits):
    losses = []
    pruner = L1NormPruner(cnn, [{"op_types": ["Conv2d"], "sparse_ratio": 0.25}])
    evaluator = _evaluator(cnn, digits, losses)
    quantizer = QATQuantizer.from_compressor(pruner, Q_CONFIG[:1], evaluator=evaluator)
    _, calibration = quantizer.compress(max_steps=2, max_epochs=None)
    assert len(losses) == 2 and sorted(calibration) == ["conv1", "conv2"]
    assert layer_sparsity(pruner.get_masks()["conv1"]["weight_mask"]) == 0.25
    assert float(cnn.conv1.module.weight.abs().sum(dim=(1, 2, 3)).eq(0).float().mean()) == 0.25


def test_chain_errors_name_the_fix(cnn, digits):
    other = copy.deepcopy(cnn)
    pruner = L1NormPruner(cnn, [{"op_types": ["Conv2d"], "sparse_ratio": 0.5}])
    with pytest.raises(ConfigError, match="has none, so pass evaluator="):
        QATQuantizer.from_compressor(pruner, Q_CONFIG)
    sub = TaylorPruner(other, [{"op_types": ["Conv2d"], "sparse_ratio": 0.5}], _evaluator(other, digits, []), 2)
    quantizer = QATQuantizer.from_compressor(AGPPruner(sub, 2, 2), Q_CONFIG)
    with pytest.raises(ConfigError, match="pruners of the chain train 4 steps first"):
        quantizer.compress(max_steps=4, max_epochs=None)


def test_model_speedup_takes_nni_30s_keywords(cnn):
    pruner = L1NormPruner(cnn, [{"op_types": ["Conv2d"], "sparse_ratio": 0.5}])
    _, masks = pruner.compress()
    pruner.unwrap_model()
    with pytest.raises(SpeedupError, match="customized_replacers=.*NNI's own tracer"):
        ModelSpeedup(cnn, DUMMY, masks_or_file=masks, customized_replacers=[object()])
    ModelSpeedup(cnn, DUMMY, masks_or_file=masks, map_location="cpu", batch_dim=0, batch_size=8,
                 garbage_collect_values=True).speedup_model()
    assert (cnn.conv1.out_channels, cnn.conv2.out_channels) == (8, 16)


def test_fusion_examples_batchnorm_align_entries_are_taken_and_checked(cnn, digits):
    align = {"module_name": "conv1", "target_name": "weight", "dims": [0]}
    entry = {"op_names": ["bn1"], "target_names": ["_output_"],
             "target_settings": {"_output_": {"align": align, "granularity": "per_channel"}}}
    config = auto_set_denpendency_group_ids(cnn, [{"op_types": ["Conv2d"], "sparse_ratio": 0.5}, entry], DUMMY)
    pruner = TaylorPruner(cnn, config, _evaluator(cnn, digits, []), training_steps=1)
    assert [w.name for w in pruner.get_modules_wrapper()] == ["conv1", "conv2"]  # bn1 follows conv1's channels
    pruner.unwrap_model()
    for bad, message in (({**align, "module_name": "conv9"}, "'conv9' is no layer"),
                         ({**align, "dims": [1]}, "follow the output channels of a layer's weight")):
        broken = {**entry, "target_settings": {"_output_": {"align": bad}}}
        with pytest.raises(PruningConfigError, match=message):
            TaylorPruner(cnn, [{"op_types": ["Conv2d"], "sparse_ratio": 0.5}, broken], _evaluator(cnn, digits, []), 1)
    with pytest.raises(PruningConfigError, match="without an 'align' setting masks activations"):
        TaylorPruner(cnn, [{"op_names": ["bn1"], "target_names": ["_output_"], "sparse_ratio": 0.5}],
                     _evaluator(cnn, digits, []), 1)
