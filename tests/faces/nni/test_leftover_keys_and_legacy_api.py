"""NNI's config-list page keys on every pruner, NNI 2.0-2.5's pruner calls, and entries that select nothing
(our own scripts in the shape of NNI's ``basic_pruners_torch.py`` and Auptimizer's QAT experiment)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import slimkit
from slimkit.compression import (
    ActivationAPoZRankFilterPruner,
    AGPPruner,
    L1FilterPruner,
    QAT_Quantizer,
    SlimPruner,
    TaylorFOWeightFilterPruner,
)
from slimkit.engines.pruning.config import PruningConfigError
from tests.faces.nni.digits import kept_channels, make_trainer


def _legacy_trainer(batches, seen):
    """NNI 2.0-2.5's ``trainer(model, optimizer, criterion, epoch)``."""
    one_epoch = make_trainer(batches, seen)
    return lambda model, optimizer, criterion, epoch: one_epoch(model, optimizer, criterion)


def test_total_sparsity_and_op_partial_names_work_on_the_engine_pruners(cnn):
    pruner = L1FilterPruner(cnn, [{"total_sparsity": 0.25, "op_partial_names": ["conv"]},
                                  {"sparsity": 0.5, "op_partial_names": ["fc1"]}])
    pruner.compress()
    masks = pruner.get_masks()
    assert sorted(masks) == ["conv1", "conv2", "fc1"]
    assert [len(kept_channels(masks[n]["weight_mask"])) for n in ("conv1", "conv2", "fc1")] == [12, 24, 32]
    pruner.unwrap_model()
    with pytest.raises(PruningConfigError, match="op_partial_names entry 'cnv' is part of no layer name"):
        L1FilterPruner(cnn, [{"sparsity": 0.5, "op_partial_names": ["cnv"]}])
    with pytest.raises(PruningConfigError, match="both 'total_sparsity' and 'sparsity'"):
        L1FilterPruner(cnn, [{"sparsity": 0.5, "total_sparsity": 0.5, "op_types": ["Conv2d"]}])


def test_a_quantizer_entry_selecting_nothing_is_skipped_with_a_warning(cnn):
    config = [{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["Conv2d", "Linear"]},
              {"quant_types": ["output"], "quant_bits": 8, "op_types": ["ReLU6"]}]  # DigitCNN has ReLU
    with pytest.warns(UserWarning, match=r"config_list\[1\] selects no layer.*The entry is skipped"):
        quantizer = QAT_Quantizer(cnn, config, torch.optim.SGD(cnn.parameters(), lr=0.01))
    assert [w.name for w in quantizer.get_modules_wrapper()] == ["conv1", "conv2", "fc1", "fc2"]
    quantizer.unwrap_model()
    with pytest.raises(slimkit.errors.ConfigError, match=r"config_list\[0\] selects no layer"):
        QAT_Quantizer(cnn, config[1:])


def test_auptimizers_qat_experiment_with_relu6_builds_on_a_relu_net(cnn):
    experiment = {"compression": {"framework": "torch", "type": "quantization", "compressor": "QAT_Quantizer",
                                  "config_list": [{"quant_types": ["weight", "output"], "quant_bits": 8,
                                                   "op_types": ["Conv2d", "Linear", "ReLU6"]},
                                                  {"quant_types": ["output"], "quant_bits": 8,
                                                   "op_types": ["ReLU6"]}]}}
    with pytest.warns(UserWarning, match="selects no layer"):
        compressor = slimkit.create_compressor(cnn, experiment, optimizer=torch.optim.SGD(cnn.parameters(), lr=0.1))
    compressor.compress()
    assert cnn(torch.rand(2, 1, 8, 8)).shape == (2, 10)


def test_legacy_slim_pruner_takes_optimizer_trainer_criterion_and_sparsifying_epochs(cnn, digits):
    seen: list[int] = []
    optimizer = torch.optim.SGD(cnn.parameters(), lr=0.01)
    pruner = SlimPruner(cnn, [{"sparsity": 0.5, "op_types": ["BatchNorm2d"]}], optimizer,
                        _legacy_trainer(digits[0][:3], seen), nn.functional.cross_entropy,
                        sparsifying_training_epochs=2)
    pruner.compress()
    assert len(seen) == 6  # two epochs of three batches
    rows = pruner.get_pruned_weights()
    assert sum(kept for _, kept, _ in rows) == 24 and sum(total for _, _, total in rows) == 48


def test_legacy_agp_pruner_trains_its_schedule_in_compress(cnn, digits, tmp_path):
    seen: list[int] = []
    optimizer = torch.optim.SGD(cnn.parameters(), lr=0.01)
    pruner = AGPPruner(cnn, [{"sparsity": 0.5, "op_types": ["Conv2d"]}], pruning_algorithm="l1", num_iterations=2,
                       epochs_per_iteration=1, trainer=_legacy_trainer(digits[0][:2], seen), optimizer=optimizer,
                       criterion=nn.functional.cross_entropy)
    pruner.compress()
    assert len(seen) == 4
    assert pruner.get_pruned_weights() == [("conv1", 8, 16), ("conv2", 16, 32)]
    pruner.export_model(tmp_path / "model.safetensors", tmp_path / "mask.safetensors")
    assert (tmp_path / "mask.safetensors").stat().st_size > 0
    with pytest.raises(PruningConfigError, match="unexpected argument.*NNI 2.0-2.5's form"):
        AGPPruner(cnn, [{"sparsity": 0.5}], optimizer=optimizer, trainer=len, criterion=len, frequency=1)


@pytest.mark.parametrize("cls", [TaylorFOWeightFilterPruner, ActivationAPoZRankFilterPruner])
def test_sparsifying_training_batches_is_the_statistics_batch_count(cnn, digits, cls):
    seen: list[int] = []
    pruner = cls(cnn, [{"sparsity": 0.5, "op_types": ["Conv2d"]}], optimizer=torch.optim.SGD(cnn.parameters(), lr=0),
                 trainer=_legacy_trainer(digits[0][:4], seen), criterion=nn.functional.cross_entropy,
                 sparsifying_training_batches=2)
    assert pruner.statistics_batch_num == 2
    pruner.compress()
    assert [len(kept_channels(m["weight_mask"])) for m in pruner.get_masks().values()] == [8, 16]
