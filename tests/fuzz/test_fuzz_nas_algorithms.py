"""The smash NAS algorithms (autoslim, bignas, darts, dsnas) at their boundary: any value for any of their
hyperparameters is taken only when it is legal, else refused naming the key; budgets no subnet can meet are
refused before any training, naming the hyperparameter to change."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slimkit import SmashConfig, smash, zoo
from slimkit.core import registry
from slimkit.errors import ConfigError
from tests.fuzz._fuzz import clear_or_ok, examples

NAS = ("autoslim", "bignas", "darts", "dsnas")
HYPERPARAMETERS = {h["name"]: h for a in NAS for h in registry.info(a)["hyperparameters"]}
NUMBER = re.compile(r"an? (integer|float) in \[([^,]+), ([^\]]+)\]")

values = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.floats(allow_nan=True),
                   st.floats(-2, 2), st.integers(-2, 20), st.text(max_size=6),
                   st.lists(st.one_of(st.floats(-1, 2), st.integers(-1, 3), st.text(max_size=2)), max_size=4))


def _legal(spec: dict, value: object) -> bool:
    """Whether ``value`` is inside what ``spec['allowed']`` says (numbers; the ratio list)."""
    match = NUMBER.fullmatch(spec["allowed"])
    if match:
        kind, low, high = match.groups()
        ok = type(value) is int or (kind == "float" and type(value) is float)
        return ok and float(low) <= value <= float(high)
    assert spec["name"].endswith("width_ratios"), spec
    return isinstance(value, (list, tuple)) and bool(value) and all(
        type(v) in (int, float) and 0 < v <= 1 for v in value)


@examples(80)
@given(st.sampled_from(sorted(HYPERPARAMETERS)), values)
def test_hyperparameter_values_taken_only_when_legal(key, value):
    cfg = SmashConfig()
    cfg["distiller"] = key.split("_", 1)[0]

    def assign() -> SmashConfig:
        cfg[key] = value
        return cfg

    result = clear_or_ok("nas_hyperparameters", assign, key)
    assert isinstance(result, ConfigError) != _legal(HYPERPARAMETERS[key], value), (key, value, result)


def _refusal(algorithm: str, **hyperparameters: object) -> str:
    cfg = SmashConfig()
    cfg["distiller"] = algorithm
    for key, value in hyperparameters.items():
        cfg[f"{algorithm}_{key}"] = value
    cfg.add_data("Digits")
    with pytest.raises(ConfigError) as caught:
        smash(zoo.load("digits_cnn").model, cfg)
    return str(caught.value)


NO_SUBNET = "no subnet meets the limits"


@pytest.mark.parametrize(("algorithm", "settings", "words"), [
    ("autoslim", {"flops_ratio": 0.01}, (NO_SUBNET, "autoslim_flops_ratio")),  # the narrowest has ~1/16 the FLOPs
    ("autoslim", {"max_flops": 1000.0}, (NO_SUBNET, "autoslim_max_flops")),
    ("bignas", {"max_params": 100.0}, (NO_SUBNET, "bignas_max_params")),
    ("bignas", {"width_ratios": [1.0]}, ("no channel group whose width can be searched",)),  # one width: no choice
])
def test_unreachable_budget_refused_before_training(algorithm, settings, words):
    message = _refusal(algorithm, supernet_steps=1, **settings)
    assert all(w in message for w in words), message
