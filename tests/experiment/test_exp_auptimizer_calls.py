"""The calls Auptimizer scripts make: aup.compression.create_compressor, update_epoch, count_flops_params,
export_model(**config), data pruners fed by the script's own training, and Auptimizer's compressor spellings."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import slimkit as aup
from slimkit import zoo
from slimkit.core import registry
from slimkit.errors import ConfigError


@pytest.fixture
def digits():
    model, _ = zoo.load("digits_cnn")
    x, y, _, _ = zoo.digits_split()
    return model, [(x[i:i + 64], y[i:i + 64]) for i in range(0, 256, 64)]


def _job(compressor: str, config_list: list, kind: str = "pruning") -> dict:
    return {"compression_framework": "torch", "compression_type": kind, "compressor": compressor,
            "config_list": config_list, "folder_name": "out", "save_model": False, "job_id": 0}


def _train(model, batches, optimizer):
    for x, y in batches:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()


@pytest.mark.parametrize(("spelling", "name"), [("activation_apoz_rank_filter", "activation_apoz_rank"),
                                                ("activation_mean_rank_filter", "activation_mean_rank"),
                                                ("taylor_fo_weight_filter", "taylor_fo_weight"),
                                                ("TaylorFOWeightPruner", "taylor_fo_weight"),
                                                ("L1NormPruner", "l1_filter"), ("QAT_Quantizer", "qat")])
def test_auptimizer_and_nni2_spellings_are_aliases(spelling, name):
    assert registry.resolve(spelling) == name


@pytest.mark.parametrize("compressor", ["activation_apoz_rank_filter", "taylor_fo_weight_filter"])
def test_data_pruners_rank_on_the_scripts_own_training(digits, tmp_path, compressor):
    model, batches = digits
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    job = _job(compressor, [{"sparsity": 0.5, "op_types": ["Conv2d"]}])
    compressor_ = aup.compression.create_compressor(model, job, optimizer=optimizer)
    assert compressor_.compress() is model and compressor_.engine.statistics_pending == 1
    with pytest.raises(ConfigError, match=r"needs 1 more optimizer step\(s\) before its masks exist; train first"):
        compressor_.apply_speedup(torch.randn(1, 1, 8, 8))
    _train(model, batches[:1], optimizer)  # statistics_batch_num=1: the masks follow the first step
    masks = compressor_.get_masks()
    assert all(float(m["weight_mask"].mean()) == 0.5 for m in masks.values())
    before, _, _ = compressor_.count_flops_params((1, 1, 8, 8), verbose=False)
    small = compressor_.apply_speedup(torch.randn(1, 1, 8, 8))
    after, params, rows = compressor_.count_flops_params((1, 1, 8, 8), verbose=False)
    assert after < before and rows[0]["weight_shape"] == (16, 1, 3, 3) and small is compressor_.model
    written = compressor_.export_model("m.safetensors", save_best_only=True, **{**job, "folder_name": tmp_path})
    assert written["model"].is_file() and written["kept_channels"].is_file()


def test_agp_update_epoch_and_export_with_the_job_config(digits, tmp_path):
    model, batches = digits
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    job = _job("agp", [{"initial_sparsity": 0.0, "final_sparsity": 0.8, "start_epoch": 0, "end_epoch": 2,
                        "frequency": 1, "op_names": ["features.0", "features.4"], "op_types": ["default"]}])
    compressor = aup.compression.create_compressor(model, job, optimizer=optimizer)
    compressor.compress()
    for epoch in (1, 2):
        _train(model, batches, optimizer)
        compressor.update_epoch(epoch)
    assert float(compressor.get_masks()["features.4"]["weight_mask"].mean()) == pytest.approx(0.2, abs=0.01)
    flops, _, _ = compressor.count_flops_params((1, 1, 8, 8), verbose=False)
    written = compressor.export_model(model_path="m.safetensors", mask_path="mask.safetensors", save_best_only=True,
                                      **{**job, "folder_name": tmp_path})
    assert written["mask"].is_file() and flops > 0  # level masks: nothing removed, nothing counted away
    with pytest.raises(ConfigError, match=r"update_epoch\(epoch\) takes the epoch number"):
        compressor.update_epoch(-1)


def test_quantizer_export_writes_the_calibration_as_mask_path(digits, tmp_path):
    model, batches = digits
    job = _job("qat", [{"quant_types": ["weight"], "quant_bits": {"weight": 8}, "op_types": ["Conv2d", "Linear"]}],
               "quantization")
    compressor = aup.compression.create_compressor(model, job, optimizer=torch.optim.SGD(model.parameters(), lr=0.0))
    compressor.compress()
    compressor.step()
    assert compressor.count_flops_params((1, 1, 8, 8), verbose=False)[0] > 0  # counted through the wrappers
    written = compressor.export_model("q.safetensors", "calibration.safetensors", folder_name=tmp_path,
                                      save_best_only=True, **{k: v for k, v in job.items() if k != "folder_name"})
    calibration = aup.compression.load_calibration(written["mask"])
    assert calibration["features.0"]["weight_bits"] == 8 and written["quantized_layers"].is_file()


def test_engine_calls_need_an_engine():
    model, _ = zoo.load("mlp")
    compressor = aup.create_compressor(model, _job("int8_dynamic", [], "quantization"))
    with pytest.raises(ConfigError, match=r"update_epoch\(\) needs a compressor that trains; 'int8_dynamic' runs once"):
        compressor.update_epoch(1)
    model, _ = zoo.load("digits_cnn")
    pruner = aup.create_compressor(model, _job("l1_filter", [{"sparsity": 0.5, "op_types": ["Conv2d"]}]))
    with pytest.raises(ConfigError, match=r"get_prune_iterations\(\) is not something 'l1_filter'"):
        pruner.get_prune_iterations()
