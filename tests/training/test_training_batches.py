"""split_batch / move_batch (one splitter for training, statistics and accuracy) and the shared losses."""

from __future__ import annotations

from collections import namedtuple

import pytest
import torch

import slimkit.training
from slimkit.data import LABEL_KEYS, move_batch, split_batch
from slimkit.engines.pruning import data_driven
from slimkit.errors import DataError
from slimkit.evaluation import accuracy
from slimkit.training import criterion_loss, cross_entropy, default_loss

X = torch.randn(4, 3)
Y = torch.tensor([0, 1, 2, 1])
XX = (X, X)


def test_one_split_batch_everywhere():
    assert slimkit.training.split_batch is split_batch is data_driven.split_batch


@pytest.mark.parametrize(("batch", "inputs", "targets"), [
    ((X, Y), X, Y),
    ([X, Y], X, Y),
    ((X,), X, None),
    (X, X, None),
    ((XX, Y), XX, Y),  # positional inputs
])
def test_split_batch_on_tuples_lists_and_tensors(batch, inputs, targets):
    got_inputs, got_targets = split_batch(batch)
    assert got_inputs is inputs and got_targets is targets


def test_split_batch_on_dicts():
    batch = {"input_ids": X, "labels": Y}
    assert split_batch(batch) == (batch, None)  # HF kwargs stay whole: the model computes its own loss
    inputs, targets = split_batch(batch, label_keys=LABEL_KEYS)
    assert list(inputs) == ["input_ids"] and targets is Y
    inputs, targets = split_batch({"x": X, "label": Y, "labels": X}, label_keys=LABEL_KEYS)
    assert list(inputs) == ["x"] and targets is Y  # the first key found wins, every label key leaves the inputs
    with pytest.raises(DataError, match=r"needs a 'label' or 'labels' key, got keys \['x'\]"):
        split_batch({"x": X}, label_keys=LABEL_KEYS)


@pytest.mark.parametrize(("batch", "named"), [
    (3, "of type int;"),
    ((X, Y, Y), "of type tuple with 3 items"),
    ([], "of type list with 0 items"),
    ("text", "of type str;"),
])
def test_split_batch_refuses_other_batches_naming_what_was_given(batch, named):
    with pytest.raises(DataError, match=named) as info:
        split_batch(batch)
    assert "yield (inputs, targets), (inputs,), a dict of model keyword inputs, or an input tensor" in str(info.value)


def test_move_batch_moves_nested_tensors_and_keeps_containers():
    Pair = namedtuple("Pair", "x y")
    batch = {"a": (X.double(), [Y]), "b": Pair(X, 3), "c": "keep"}
    moved = move_batch(batch, "meta")
    assert moved["a"][0].device.type == "meta" and moved["a"][0].dtype == torch.float64
    assert moved["a"][1][0].device.type == "meta" and isinstance(moved["a"][1], list)
    assert isinstance(moved["b"], Pair) and moved["b"].y == 3 and moved["c"] == "keep"


def test_accuracy_reads_batches_with_the_same_splitter():
    model = torch.nn.Linear(3, 3)
    preds = model(X).argmax(1)
    assert accuracy(model, [{"input": X, "labels": preds}]) == 1.0
    with pytest.raises(DataError, match="accuracy needs batches that are \\(inputs, labels\\) pairs"):
        accuracy(model, [X])


def test_cross_entropy_flattens_token_logits_and_ignores_minus_100():
    logits = torch.randn(2, 5, 7)
    targets = torch.randint(0, 7, (2, 5))
    targets[0, :2] = -100
    keep = targets.flatten() != -100
    expected = torch.nn.functional.cross_entropy(logits.flatten(0, 1)[keep], targets.flatten()[keep])
    torch.testing.assert_close(cross_entropy(logits, targets), expected)
    half, classes = logits[:, 0].half(), targets[:, 1].clamp(min=0)
    torch.testing.assert_close(cross_entropy(half, classes), torch.nn.functional.cross_entropy(half.float(), classes))


def test_default_loss_errors_name_what_was_given():
    model = torch.nn.Linear(3, 3)
    with pytest.raises(DataError, match=r"float32 targets.*need \(inputs, integer labels\) batches"):
        default_loss(model, (X, X))
    with pytest.raises(DataError, match=r"no targets in a Tensor batch and the model's output has no \.loss"):
        default_loss(model, X)
    with pytest.raises(DataError, match=r"logits \(4, 3\).*targets \(2,\)"):
        default_loss(model, (X, Y[:2]))
    with pytest.raises(DataError, match="criterion_loss\\(mse_loss\\) needs \\(inputs, targets\\) batches"):
        criterion_loss(torch.nn.functional.mse_loss)(model, X)
    torch.testing.assert_close(criterion_loss(torch.nn.functional.mse_loss)(model, (X, X)),
                               torch.nn.functional.mse_loss(model(X), X))
