"""Real training: each quantizer fine-tunes the zoo's digits CNN to within a point of its fp32 accuracy."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from slimkit import zoo
from slimkit.engines.quantization import (
    BNNEngine,
    DoReFaEngine,
    LsqEngine,
    QATEngine,
    QuantizedLayer,
)
from slimkit.zoo.digits_cnn import accuracy, digits_split

W8 = [{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["default"]}]
WI8 = [{"quant_types": ["weight", "input"], "quant_bits": 8, "op_types": ["default"]}]
BINARY = [{"quant_types": ["weight"], "quant_bits": 1, "op_types": ["default"]}]


@pytest.fixture(scope="module")
def digits():
    base = zoo.load("digits_cnn").model.eval()
    x_train, y_train, x_test, y_test = digits_split()
    return base, x_train, y_train, x_test, y_test, accuracy(base, x_test, y_test)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny batches: one thread is several times faster on a shared CPU
    yield
    torch.set_num_threads(threads)


def _fine_tune(digits, cls, config, epochs, lr=1e-3, **kwargs):
    base, x_train, y_train, x_test, y_test, _ = digits
    torch.manual_seed(0)
    model = copy.deepcopy(base)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    quantizer = cls(model, config, optimizer, **kwargs)
    for epoch in range(epochs):
        quantizer.update_epoch(epoch)
        model.train()
        order = torch.randperm(len(x_train))
        for i in range(0, len(x_train), 64):
            idx = order[i : i + 64]
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    trained = accuracy(model, x_test, y_test)
    quantizer.freeze()
    frozen = accuracy(model, x_test, y_test)
    assert sum(isinstance(m, QuantizedLayer) and "weight" in m.bits for m in model.modules()) == 5
    return trained, frozen


@pytest.mark.parametrize(
    ("cls", "config", "kwargs"),
    [(QATEngine, WI8, {}), (DoReFaEngine, W8, {}), (LsqEngine, WI8, {}), (QATEngine, W8,
                                                                                  {"per_channel": False})],
    ids=["qat-w8a8", "dorefa-w8", "lsq-w8a8", "qat-w8-per-tensor"],
)
def test_8_bit_training_stays_within_one_point_of_fp32(digits, cls, config, kwargs):
    fp32 = digits[-1]
    assert fp32 > 0.98
    trained, frozen = _fine_tune(digits, cls, config, epochs=2, **kwargs)
    assert trained >= fp32 - 0.01
    assert frozen >= fp32 - 0.01


def test_binary_weights_recover_after_fine_tuning(digits):
    base, _, _, x_test, y_test, fp32 = digits
    model = copy.deepcopy(base)
    quantizer = BNNEngine(model, BINARY)
    untrained = accuracy(model, x_test, y_test)  # BatchNorm statistics no longer match the binary weights
    quantizer.unwrap_model()
    trained, frozen = _fine_tune(digits, BNNEngine, BINARY, epochs=2)
    assert untrained < 0.5
    assert frozen >= fp32 - 0.015


def test_binary_weights_and_activations_learn(digits):
    config = BINARY + [{"quant_types": ["output"], "quant_bits": 1, "op_types": ["BatchNorm2d"]}]
    _, frozen = _fine_tune(digits, BNNEngine, config, epochs=4)
    assert frozen >= 0.8  # binary activations cost accuracy on this small CNN (fp32: ~0.99; measured ~0.87)
