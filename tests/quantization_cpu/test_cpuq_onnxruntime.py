from __future__ import annotations

import pytest
import torch

from slimkit import SmashConfig, smash, zoo
from slimkit.errors import ConfigError, DataError, ModelNotSupportedError


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
