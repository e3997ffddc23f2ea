from __future__ import annotations

import collections
import gc
import inspect
import json
from pathlib import Path

import pytest
import torch

from slimkit import SmashConfig, SmashedModel, smash, zoo
from slimkit.engines.onnx import OnnxRuntimeModule
from slimkit.engines.onnx import export as onnx_export
from slimkit.engines.onnx import module as onnx_module
from slimkit.errors import ConfigError, DataError, ModelNotSupportedError, SaveLoadError
from slimkit.evaluation import size_on_disk


@pytest.fixture(scope="module")
def bert_ort():
    model, inputs = zoo.load("tiny_bert")
    cfg = SmashConfig({"onnxruntime": {"threads": 1}}, device="cpu")
    cfg.add_example_inputs(inputs)
    return model, inputs, smash(model, cfg, verbose=False)


def test_takes_the_original_arguments_and_returns_the_original_output_type(bert_ort):
    model, inputs, smashed = bert_ort
    with torch.no_grad():
        ref = model(**inputs).logits
    out = smashed(**inputs)
    assert type(out).__name__ == "SequenceClassifierOutput"
    torch.testing.assert_close(out.logits, ref, atol=1e-5, rtol=1e-4)
    positional = smashed(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])
    torch.testing.assert_close(positional.logits, out.logits, atol=0, rtol=0)


def test_batch_and_sequence_axes_are_dynamic(bert_ort):
    model, inputs, smashed = bert_ort
    small = {k: v[:1, :9] for k, v in inputs.items()}
    with torch.no_grad():
        torch.testing.assert_close(smashed(**small).logits, model(**small).logits, atol=1e-5, rtol=1e-4)


def test_missing_input_is_named(bert_ort):
    _, inputs, smashed = bert_ort
    with pytest.raises(ModelNotSupportedError, match=r"missing \['attention_mask', 'token_type_ids'\]"):
        smashed(inputs["input_ids"])


def test_int8_file_is_smaller_than_fp32():
    model, inputs = zoo.load("mlp", hidden_features=256)
    sizes = {}
    for quantize in ("none", "int8_dynamic"):
        cfg = SmashConfig({"onnxruntime": {"quantize": quantize}}, device="cpu")
        cfg.add_example_inputs(inputs)
        sizes[quantize] = smash(model, cfg, verbose=False).applied[0]["state"]["onnx_bytes"]
    assert sizes["int8_dynamic"] < 0.4 * sizes["none"]


def test_torch_quantizers_do_not_combine_with_the_onnx_export():
    model, inputs = zoo.load("mlp")
    cfg = SmashConfig(["int8_dynamic", "onnxruntime"], device="cpu")
    cfg.add_example_inputs(inputs)
    with pytest.raises(ConfigError, match="int8_dynamic and onnxruntime cannot be combined"):
        smash(model, cfg, verbose=False)


def test_needs_example_inputs_or_data():
    model, _ = zoo.load("mlp")
    with pytest.raises(DataError, match=r"onnxruntime needs example inputs.*add_example_inputs"):
        smash(model, SmashConfig(["onnxruntime"], device="cpu"), verbose=False)


@pytest.mark.slow
def test_dynamo_exporter_matches_torch():
    model, inputs = zoo.load("resnet_tiny")
    cfg = SmashConfig({"onnxruntime": {"exporter": "dynamo"}}, device="cpu")
    cfg.add_example_inputs(inputs)
    smashed = smash(model, cfg, verbose=False)
    with torch.no_grad():
        torch.testing.assert_close(smashed(inputs), model(inputs), atol=1e-5, rtol=1e-4)


# --------------------------------------------------------------------------- save / load (save_fn=ARTIFACTS)
class UserNet(torch.nn.Module):
    """A user-defined class slimkit cannot rebuild: loading must work from the .onnx file alone."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x, mask=None):
        h = torch.relu(self.conv2(torch.relu(self.conv1(x if mask is None else x * mask))))
        return {"logits": self.fc(h.mean((2, 3))), "features": h}


def _user_net():
    torch.manual_seed(0)
    return UserNet().eval(), torch.randn(4, 1, 8, 8)


def _files(folder):
    return sorted(p.name for p in folder.iterdir())


def test_save_writes_the_onnx_file_only_and_reloads_identically(bert_ort, tmp_path):
    _, inputs, smashed = bert_ort
    smashed.save_pretrained(tmp_path / "s")
    assert _files(tmp_path / "s") == ["README.md", "example_inputs.safetensors", "model.onnx", "smash_config.json"]
    payload = json.loads((tmp_path / "s" / "smash_config.json").read_text())
    assert payload["weights_format"] == "artifacts" and payload["weights_file"] is None
    assert payload["applied"][0]["state"]["output_type"] == "transformers.modeling_outputs.SequenceClassifierOutput"
    again = SmashedModel.from_pretrained(tmp_path / "s")
    assert again.algorithms == ["onnxruntime"] and again.applied == smashed.applied
    assert isinstance(again.model, OnnxRuntimeModule) and again.model.onnx_path == str(tmp_path / "s" / "model.onnx")
    out = again(**inputs)
    assert type(out).__name__ == "SequenceClassifierOutput"
    assert torch.equal(out.logits, smashed(**inputs).logits)
    assert torch.equal(again(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"]).logits,
                       out.logits)
    with pytest.raises(ModelNotSupportedError, match=r"missing \['attention_mask', 'token_type_ids'\]"):
        again(inputs["input_ids"])
    assert SmashConfig.from_json(tmp_path / "s") == smashed.smash_config


def test_int8_save_holds_the_int8_file_and_is_under_0_4_of_fp32_weights(tmp_path):
    model, inputs = zoo.load("tiny_bert", hidden_size=128, intermediate_size=512, vocab_size=512)
    cfg = SmashConfig({"onnxruntime": {"threads": 1, "quantize": "int8_dynamic"}}, device="cpu")
    cfg.add_example_inputs(inputs)
    smashed = smash(model, cfg, verbose=False)
    smashed.save_pretrained(tmp_path / "q")
    assert _files(tmp_path / "q") == ["README.md", "example_inputs.safetensors", "model.int8.onnx", "smash_config.json"]
    assert size_on_disk(smashed) < 0.4 * size_on_disk(model)
    again = SmashedModel.from_pretrained(tmp_path / "q")
    assert torch.equal(again(**inputs).logits, smashed(**inputs).logits)


def test_user_module_reloads_without_model_argument_and_keeps_dict_output(tmp_path):
    model, x = _user_net()
    cfg = SmashConfig({"onnxruntime": {"threads": 1}}, device="cpu")
    cfg.add_example_inputs(x)
    smashed = smash(model, cfg, verbose=False)
    smashed.save_pretrained(tmp_path / "u")
    again = SmashedModel.from_pretrained(tmp_path / "u")  # UserNet cannot be rebuilt: the graph is enough
    ref, out = smashed(x), again(x)
    assert type(out) is dict and list(out) == ["logits", "features"]
    assert all(torch.equal(out[k], ref[k]) for k in ref)
    torch.testing.assert_close(out["logits"], model(x)["logits"], atol=1e-5, rtol=1e-4)
    assert torch.equal(again(x=x)["logits"], ref["logits"])  # keyword call binds through the saved signature


def test_pruner_then_onnxruntime_reloads_the_pruned_graph_without_the_base(tmp_path):
    import onnx

    model, x = _user_net()
    cfg = SmashConfig({"l1_filter": {"sparsity": 0.5}, "onnxruntime": {"threads": 1}}, device="cpu")
    cfg.add_example_inputs(x)
    smashed = smash(model, cfg, verbose=False)
    smashed.save_pretrained(tmp_path / "p")
    shapes = {t.name: list(t.dims) for t in onnx.load(str(tmp_path / "p" / "model.onnx")).graph.initializer}
    assert shapes["conv1.weight"] == [8, 1, 3, 3]  # the shrunk layers are baked into the saved graph
    again = SmashedModel.from_pretrained(tmp_path / "p")
    assert again.algorithms == ["l1_filter", "onnxruntime"]
    assert again.applied[0]["state"]["kept_channels"] == smashed.applied[0]["state"]["kept_channels"]
    assert torch.equal(again(x)["logits"], smashed(x)["logits"])


def test_temp_folder_is_removed_with_the_module_but_the_save_dir_is_not(tmp_path):
    model, x = _user_net()
    cfg = SmashConfig({"onnxruntime": {"threads": 1}}, device="cpu")
    cfg.add_example_inputs(x)
    smashed = smash(model, cfg, verbose=False)
    temp = Path(smashed.model.onnx_path).parent
    smashed.save_pretrained(tmp_path / "g")
    again = SmashedModel.from_pretrained(tmp_path / "g")
    ref = again(x)["logits"]
    del smashed
    gc.collect()
    assert not temp.exists()
    assert torch.equal(again(x)["logits"], ref)  # the reloaded session never read the temp folder
    again.save_pretrained(tmp_path / "g")  # re-saving into the folder it was loaded from
    del again
    gc.collect()
    assert _files(tmp_path / "g") == ["README.md", "example_inputs.safetensors", "model.onnx", "smash_config.json"]
    assert torch.equal(SmashedModel.from_pretrained(tmp_path / "g")(x)["logits"], ref)


@pytest.fixture
def saved_mlp(tmp_path):
    model, inputs = zoo.load("mlp")
    cfg = SmashConfig({"onnxruntime": {"threads": 1}}, device="cpu")
    cfg.add_example_inputs(inputs)
    smash(model, cfg, verbose=False).save_pretrained(tmp_path / "m")
    return tmp_path / "m"


def test_missing_onnx_file_is_named(saved_mlp):
    (saved_mlp / "model.onnx").unlink()
    with pytest.raises(SaveLoadError, match=r"model\.onnx is missing: the save is incomplete"):
        SmashedModel.from_pretrained(saved_mlp)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_onnx_file_is_named(saved_mlp, damage):
    file = saved_mlp / "model.onnx"
    data = file.read_bytes()
    file.write_bytes(b"not an onnx graph" if damage == "garbage" else data[: len(data) // 2])
    with pytest.raises(SaveLoadError, match=r"ONNX Runtime cannot load .*model\.onnx .*truncated or corrupt"):
        SmashedModel.from_pretrained(saved_mlp)


def test_edited_record_is_refused(saved_mlp):
    file = saved_mlp / "smash_config.json"
    payload = json.loads(file.read_text())
    del payload["applied"][0]["state"]["signature"]
    file.write_text(json.dumps(payload))
    with pytest.raises(SaveLoadError, match=r"onnxruntime record is incomplete or invalid \(KeyError"):
        SmashedModel.from_pretrained(saved_mlp)
    payload["applied"][0]["state"].update(signature=[], onnx_file="../model.onnx")
    file.write_text(json.dumps(payload))
    with pytest.raises(SaveLoadError, match=r"'\.\./model\.onnx' is not a plain file name"):
        SmashedModel.from_pretrained(saved_mlp)


def test_external_data_files_are_saved_and_required(tmp_path, monkeypatch):
    import onnx

    real_export = onnx_export.export_onnx

    def export_with_external_data(model, inputs, path, exporter):  # what torch does for graphs over 2 GB
        result = real_export(model, inputs, path, exporter)
        onnx.save_model(onnx.load(str(path)), str(path), save_as_external_data=True, location="weights.bin",
                        size_threshold=0)
        return result

    monkeypatch.setattr(onnx_export, "export_onnx", export_with_external_data)
    model, inputs = zoo.load("mlp")
    cfg = SmashConfig({"onnxruntime": {"threads": 1}}, device="cpu")
    cfg.add_example_inputs(inputs)
    smashed = smash(model, cfg, verbose=False)
    assert smashed.applied[0]["state"]["external_data"] == ["weights.bin"]
    smashed.save_pretrained(tmp_path / "x")
    assert _files(tmp_path / "x") == ["README.md", "example_inputs.safetensors", "model.onnx", "smash_config.json",
                                      "weights.bin"]
    assert torch.equal(SmashedModel.from_pretrained(tmp_path / "x")(inputs), smashed(inputs))
    (tmp_path / "x" / "weights.bin").unlink()
    with pytest.raises(SaveLoadError, match=r"weights\.bin is missing"):
        SmashedModel.from_pretrained(tmp_path / "x")


def test_output_type_names_import_only_transformers_model_outputs():
    from transformers.modeling_outputs import SequenceClassifierOutput

    name = onnx_module.output_type_to_json(SequenceClassifierOutput)
    assert onnx_module.output_type_from_json(name) is SequenceClassifierOutput
    assert onnx_module.output_type_to_json(dict) == "dict" and onnx_module.output_type_from_json("dict") is dict
    assert onnx_module.output_type_to_json(collections.OrderedDict) is None  # reloads as a tuple
    with pytest.warns(RuntimeWarning, match="returns a tuple"):
        assert onnx_module.output_type_from_json("os.system") is None
    with pytest.warns(RuntimeWarning, match="returns a tuple"):
        assert onnx_module.output_type_from_json("transformers.modeling_outputs.torch") is None


def test_signature_round_trips_with_json_defaults_only():
    def forward(x, /, mask=None, *rest, scale=2.0, dims=(2, 3), **extra):
        return x

    recorded = json.loads(json.dumps(onnx_module.signature_to_json(inspect.signature(forward))))
    assert recorded[4] == {"name": "dims", "kind": "KEYWORD_ONLY", "default": None}  # a tuple is not kept
    again = onnx_module.signature_from_json(recorded)
    assert str(again) == "(x, /, mask=None, *rest, scale=2.0, dims=None, **extra)"
    assert onnx_module.bind_arguments(again, (1, 2), {"scale": 3.0}) == {"x": 1, "mask": 2, "scale": 3.0}
