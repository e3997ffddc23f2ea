"""Bad arguments to fit() fail early with a slimkit error that names what was given and what is allowed."""

from __future__ import annotations

import pytest
import torch

from slimkit.errors import ConfigError, DataError
from slimkit.training import fit
from tests.training.conftest import make_mlp


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"epochs": 0}, r"epochs must be an integer >= 1 \(passes over the batches\) or None, got 0"),
    ({"steps": 2.5}, r"steps must be an integer >= 1 \(optimizer steps\) or None, got 2.5"),
    ({"grad_clip": 0}, r"grad_clip must be a number > 0 \(the max gradient norm\) or None, got 0"),
    ({"optimizer": "adma"}, r"Unknown optimizer 'adma'; allowed: adam, adamw, sgd, .* Did you mean 'adam'"),
    ({"lr": -1.0}, r"lr must be a number > 0, got -1.0"),
    ({"patience": 2}, r"eval_every and patience need an eval_fn"),
    ({"eval_fn": lambda m: 1.0, "mode": "up"}, r"mode must be one of max, min .*got 'up'"),
    ({"eval_fn": lambda m: 1.0, "patience": 0}, r"patience must be an integer >= 1 .*got 0"),
    ({"eval_fn": lambda m: "good"}, r"eval_fn must return a number \(the metric\), got str after step 5"),
    ({"eval_fn": lambda m: float("nan")}, r"eval_fn returned nan after step 5; it must return a finite number"),
    ({"loss": lambda m, b: m(b[0])},
     r"loss\(model, batch\) must return a scalar tensor, got a Tensor of shape \(16, 10\)"),
])
def test_bad_settings_raise_config_errors(few_batches, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        fit(make_mlp(), few_batches, progress=False, **kwargs)


def test_bad_batches_raise_data_errors(few_batches):
    model = make_mlp()
    with pytest.raises(DataError, match=r"needs an iterable of batches .* got a Tensor"):
        fit(model, few_batches[0][0], progress=False)
    with pytest.raises(DataError, match=r"yielded no batch \(after 0 steps\)"):
        fit(model, [], progress=False)
    with pytest.raises(DataError, match=r"no batch in epoch 2 \(after 5 steps\).*a generator is used up"):
        fit(model, (b for b in few_batches), epochs=2, progress=False)
    with pytest.raises(DataError, match=r"Cannot read a batch of type tuple with 3 items"):
        fit(model, [(*few_batches[0], None)], progress=False)
    with pytest.raises(DataError, match=r"need \(inputs, integer labels\) batches"):
        fit(model, [x for x, _ in few_batches], progress=False)
    with pytest.raises(ConfigError, match="no trainable parameter"):
        fit(torch.nn.Flatten(), few_batches, progress=False)
