from __future__ import annotations

import json
import time

import torch

from slimkit import zoo
from slimkit.zoo import digits_cnn


def test_digits_split_is_fixed_and_scaled():
    x_train, y_train, x_test, y_test = zoo.digits_split()
    assert x_train.shape == (1347, 1, 8, 8) and x_test.shape == (450, 1, 8, 8)
    assert y_train.shape == (1347,) and y_test.dtype == torch.int64
    assert x_train.dtype == torch.float32 and float(x_train.min()) == 0.0 and float(x_train.max()) == 1.0
    again = zoo.digits_split()
    assert torch.equal(again[2], x_test) and torch.equal(again[3], y_test)
    again[0].zero_()  # callers get their own copies
    assert float(zoo.digits_split()[0].max()) == 1.0


def test_digits_cnn_is_accurate_and_uses_bn(shared_cache):
    zm = zoo.load("digits_cnn")
    model = zm.model
    assert 140_000 <= sum(p.numel() for p in model.parameters()) <= 170_000
    kinds = [type(m).__name__ for m in model.features]
    assert kinds[:3] == ["Conv2d", "BatchNorm2d", "ReLU"] and kinds.count("BatchNorm2d") == 3
    _, _, x_test, y_test = zoo.digits_split()
    acc = digits_cnn.accuracy(model, x_test, y_test)
    assert acc >= 0.97
    assert abs(zm.meta["test_accuracy"] - acc) < 1e-6
    assert zm.example_inputs.shape == (64, 1, 8, 8)
    assert zm.model(zm.example_inputs).shape == (64, 10)


def test_second_load_hits_cache(shared_cache):
    first = zoo.load("digits_cnn")
    start = time.perf_counter()
    second = zoo.load("digits_cnn", batch_size=8)
    assert time.perf_counter() - start < 1.0
    assert second.meta["cache_hit"] is True
    assert second.example_inputs.shape == (8, 1, 8, 8)
    for key, value in first.model.state_dict().items():
        assert torch.equal(second.model.state_dict()[key], value), key
    folder = shared_cache / "zoo" / "digits_cnn-v1"
    assert sorted(p.name for p in folder.iterdir()) == ["meta.json", "model.safetensors"]
    assert json.loads((folder / "meta.json").read_text())["recipe"]["seed"] == 0


def test_digits_build_matches_load(shared_cache):
    loaded = zoo.load("digits_cnn").model
    built = zoo.build("digits_cnn")
    assert {k: v.shape for k, v in built.state_dict().items()} == {k: v.shape for k, v in loaded.state_dict().items()}


def test_corrupt_cache_is_replaced(fresh_cache, monkeypatch):
    calls = []

    def fake_train():  # stands in for the 3 s training; the cache logic is what is under test
        calls.append(1)
        return digits_cnn.DigitsCNN().eval(), {"test_accuracy": 0.5}

    monkeypatch.setattr(digits_cnn, "train", fake_train)
    folder = fresh_cache / "zoo" / "digits_cnn-v1"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    (folder / "meta.json").write_text("{}")
    zm = zoo.load("digits_cnn")
    assert calls == [1] and zm.meta["cache_hit"] is False
    again = zoo.load("digits_cnn")
    assert calls == [1] and again.meta["cache_hit"] is True and again.meta["test_accuracy"] == 0.5
    assert torch.equal(again.model.features[0].weight, zm.model.features[0].weight)
