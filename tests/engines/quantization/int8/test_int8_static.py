from __future__ import annotations

import pytest
import torch

from slimkit import SmashConfig, SmashedModel, smash, zoo
from slimkit.errors import ConfigError


@pytest.fixture(scope="module")
def digits():
    model, _ = zoo.load("digits_cnn")
    x_train, _, x_test, y_test = zoo.digits_split()
    return model, x_test, y_test


def _accuracy(model, x, y):
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def test_digits_calibrated_on_data_keeps_accuracy_and_reloads_bit_identical(digits, tmp_path):
    model, x_test, y_test = digits
    cfg = SmashConfig({"int8_static": {"calibration_samples": 128}}, device="cpu")
    cfg.add_data("Digits")
    smashed = smash(model, cfg, verbose=False)
    state = smashed.applied[0]["state"]
    assert state["calibration"] == "data Digits" and state["calibration_images"] == 128
    assert state["input_shape"] == [1, 1, 8, 8] and state["quantized_modules"] == 5  # 3 ConvReLU, 2 Linear
    assert _accuracy(smashed, x_test, y_test) >= _accuracy(model, x_test, y_test) - 0.01
    smashed.save_pretrained(tmp_path / "m")
    again = SmashedModel.from_pretrained(tmp_path / "m")  # data is not saved: replay needs none
    assert torch.equal(again(x_test), smashed(x_test))


def test_exclude_keeps_matching_modules_float(digits):
    model, x_test, _ = digits
    cfg = SmashConfig({"int8_static": {"exclude": ["classifier.*"]}}, device="cpu")
    cfg.add_example_inputs(x_test[:32])
    smashed = smash(model, cfg, verbose=False)
    modules = smashed.model.named_modules()
    linears = [m for n, m in modules if n.startswith("classifier") and "Linear" in type(m).__name__]
    assert linears and all(".quantized" not in type(m).__module__ for m in linears)
    assert smashed.applied[0]["state"]["quantized_modules"] == 3


def test_unknown_exclude_pattern_lists_the_real_layers(digits):
    model, x_test, _ = digits
    cfg = SmashConfig({"int8_static": {"exclude": ["feature.0"]}}, device="cpu")
    cfg.add_example_inputs(x_test[:8])
    with pytest.raises(ConfigError, match=r"\['feature.0'\] match no module.*features\.0"):
        smash(model, cfg, verbose=False)
