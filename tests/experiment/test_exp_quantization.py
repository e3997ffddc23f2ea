"""Experiments name quantizers through the one registry: a real qat run on digits, export, reload; smash-run ones."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from slimkit import zoo
from slimkit.engines.quantization import QATEngine, QuantizedLayer
from slimkit.errors import ConfigError
from slimkit.faces.auptimizer import create_compressor, load_compressed_model
from slimkit.zoo.digits_cnn import accuracy, digits_split

QAT_EXPERIMENT = {
    "name": "digits-qat",
    "compression": {
        "framework": "torch",
        "type": "quantization",
        "compressor": "qat",
        "config_list": [{"quant_types": ["weight", "input"], "quant_bits": 8, "op_types": ["default"]}],
    },
}


def test_qat_experiment_on_digits_trains_exports_and_reloads_identically(tmp_path):
    torch.manual_seed(0)
    model, _ = zoo.load("digits_cnn", batch_size=16)
    x_train, y_train, x_test, y_test = digits_split()
    base_accuracy = accuracy(model, x_test, y_test)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    comp = create_compressor(model, QAT_EXPERIMENT, optimizer=optimizer)
    assert comp.kind == "quantization" and isinstance(comp.engine, QATEngine)
    model = comp.compress()
    model.train()
    for start in range(0, 512, 64):  # one short fine-tuning pass; the patched step drives the quantizer
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x_train[start:start + 64]), y_train[start:start + 64]).backward()
        optimizer.step()
    assert comp.engine.steps == 8
    written = comp.export_model("model.safetensors", folder_name=tmp_path)
    assert written["model"].is_file() and written["quantized_layers"].is_file()
    frozen = comp.model.eval()
    assert sum(isinstance(m, QuantizedLayer) for m in frozen.modules()) >= 3
    assert accuracy(frozen, x_test, y_test) >= base_accuracy - 0.02

    reloaded = load_compressed_model(zoo.build("digits_cnn"), written["model"]).eval()
    with torch.no_grad():
        assert torch.equal(reloaded(x_test), frozen(x_test))
    codes = [m.weight_codes for m in reloaded.modules() if isinstance(m, QuantizedLayer)]
    assert codes and all(c.dtype == torch.uint8 for c in codes)


@pytest.mark.parametrize(("name", "bits"), [("QATQuantizer", 8), ("LsqQuantizer", 8), ("dorefa", 8),
                                            ("BNNQuantizer", 1)])
def test_engine_quantizers_resolve_by_every_name(name, bits):
    model, _ = zoo.load("digits_cnn", batch_size=4)
    comp = create_compressor(model, {"type": "quantization", "compressor": name,
                                     "config_list": [{"quant_types": ["weight"], "quant_bits": bits}]})
    assert comp.kind == "quantization" and comp.engine is not None
    assert type(comp.engine).__name__.lower().startswith(comp.name[:3])


def test_engine_less_quantizer_runs_through_smash_and_reloads(tmp_path):
    model, x = zoo.load("digits_cnn", batch_size=8)
    comp = create_compressor(model, {"type": "quantization", "compressor": "int8_dynamic",
                                     "config_list": [{"op_types": ["default"]}]})
    assert comp.engine is None
    with pytest.raises(ConfigError, match="before compress"):
        comp.export_model(tmp_path / "early")
    quantized = comp.compress()
    written = comp.export_model(tmp_path / "int8")
    assert (written["model"] / "smash_config.json").is_file()
    reloaded = load_compressed_model(zoo.build("digits_cnn"), written["model"])
    with torch.no_grad():
        assert torch.equal(reloaded(x), quantized(x))


def test_engine_less_quantizer_reads_hyperparameters_from_config_list():
    model, _ = zoo.load("digits_cnn", batch_size=4)
    comp = create_compressor(model, {"type": "quantization", "compressor": "half",
                                     "config_list": [{"op_types": ["default"]}]})
    assert comp.engine is None
    with pytest.raises(ConfigError, match=r"config_list key 'quant_bitz' means nothing to 'int8_dynamic'"):
        create_compressor(model, {"type": "quantization", "compressor": "int8_dynamic",
                                  "config_list": [{"quant_bitz": 8}]})
    with pytest.raises(ConfigError, match=r"takes no optimizer"):
        create_compressor(model, "int8_dynamic", config_list=[], optimizer=torch.optim.SGD(model.parameters(), 0.1))
