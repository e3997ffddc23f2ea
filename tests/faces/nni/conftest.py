"""Fixtures of the NNI face tests: the digits split and a DigitCNN pre-trained on it once per session."""

from __future__ import annotations

import pytest
import torch

from tests.faces.nni.digits import Batch, DigitCNN, accuracy, digit_batches, train


@pytest.fixture(scope="session")
def digits() -> tuple[list[Batch], list[Batch]]:
    """``(train, test)`` batches of 64 of sklearn's 8x8 digits."""
    return digit_batches()


@pytest.fixture(scope="session")
def pretrained(digits) -> tuple[dict[str, torch.Tensor], float]:
    """The state of a DigitCNN after 3 epochs of Adam, and its test accuracy."""
    torch.manual_seed(0)
    model = train(DigitCNN(), digits[0], epochs=3)
    return {k: v.clone() for k, v in model.state_dict().items()}, accuracy(model, digits[1])


@pytest.fixture
def cnn(pretrained) -> DigitCNN:
    """A fresh copy of the pre-trained DigitCNN (a test may prune it in place)."""
    torch.manual_seed(1)
    model = DigitCNN()
    model.load_state_dict(pretrained[0])
    return model.eval()
