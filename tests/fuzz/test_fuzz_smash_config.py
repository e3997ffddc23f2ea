"""SmashConfig at its boundary: every construction form, ``cfg[key] = value`` and JSON files of any shape.

A case passes when slimkit accepts the input (and a saved config reads back equal) or raises its own error
whose message names the key or field at fault. Anything else (AttributeError, TypeError...) fails.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from slimkit import SmashConfig
from slimkit.core import registry
from slimkit.core.contract import GROUPS
from tests.fuzz._fuzz import clear_or_ok, examples

ALGORITHMS = registry.all_names()
HP_KEYS = [h["name"] for n in registry.names() for h in registry.info(n)["hyperparameters"]]
FIELDS = ["schema_version", "algorithms", "hyperparameters", "device", "data"]

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)
keys = st.one_of(st.sampled_from(list(GROUPS)), st.sampled_from(HP_KEYS), st.sampled_from(ALGORITHMS),
                 st.text(max_size=20))
#: values that are often legal: algorithm names, numbers in the usual ranges, bools, short string lists
likely_values = st.one_of(st.sampled_from(ALGORITHMS), st.floats(0, 1), st.integers(0, 16), st.booleans(),
                          st.lists(st.text(max_size=6), max_size=3), json_values)
algorithm_maps = st.dictionaries(st.one_of(st.sampled_from(list(GROUPS)), st.text(max_size=10)),
                                 st.one_of(st.sampled_from(ALGORITHMS), json_values), max_size=4)
hyperparameter_maps = st.dictionaries(keys, likely_values, max_size=4)
payloads = st.one_of(
    json_values,
    st.fixed_dictionaries({"schema_version": st.one_of(st.just(1), json_values)},
                          optional={"algorithms": st.one_of(algorithm_maps, json_values),
                                    "hyperparameters": st.one_of(hyperparameter_maps, json_values),
                                    "device": st.one_of(st.sampled_from(["cpu", "auto", "cuda", "cuda:7"]),
                                                        json_values),
                                    "data": json_values}),
)


def _names(value: object) -> tuple[str, ...]:
    """Words a clear message about ``value`` may use: its repr and the field names."""
    return (repr(value), *FIELDS, *GROUPS, "SmashConfig", "key")


def _round_trips(cfg: SmashConfig) -> None:
    again = SmashConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg, (again.to_dict(), cfg.to_dict())


@examples(250)
@given(payloads)
def test_from_dict_any_payload(payload):
    result = clear_or_ok("smash_config", lambda: SmashConfig.from_dict(payload), *FIELDS, "SmashConfig", "key",
                         "algorithm", "hyperparameter", "device")
    if isinstance(result, SmashConfig):
        _round_trips(result)


@examples(150)
@given(st.one_of(json_values, st.lists(st.one_of(st.sampled_from(ALGORITHMS), json_values), max_size=4),
                 st.dictionaries(st.one_of(st.sampled_from(ALGORITHMS), st.text(max_size=8)),
                                 st.one_of(st.dictionaries(st.text(max_size=12), likely_values, max_size=3),
                                           json_values), max_size=3)),
       st.one_of(st.none(), st.sampled_from(["cpu", "auto", "tpu", ""]), json_values))
def test_constructor_any_form(algorithms, device):
    result = clear_or_ok("smash_config", lambda: SmashConfig(algorithms, device=device), "SmashConfig", "algorithm",
                         "hyperparameter", "device", "key", "Unknown", "Invalid")
    if isinstance(result, SmashConfig):
        _round_trips(result)


@examples(200)
@given(st.lists(st.tuples(st.one_of(keys, json_values), likely_values), min_size=1, max_size=4))
def test_setitem_any_key_and_value(pairs):
    cfg = SmashConfig(device="cpu")
    for key, value in pairs:
        clear_or_ok("smash_config", lambda k=key, v=value: cfg.__setitem__(k, v), repr(key), repr(value),
                    "SmashConfig key", "algorithm")
    _round_trips(cfg)


@examples(100)
@given(st.one_of(payloads.map(lambda p: json.dumps(p).encode()), st.binary(max_size=64),
                 payloads.map(lambda p: json.dumps(p).encode()[: len(json.dumps(p)) // 2])))
def test_json_file_of_any_shape(content):
    with tempfile.TemporaryDirectory() as folder:
        file = Path(folder) / "smash_config.json"
        file.write_bytes(content)
        result = clear_or_ok("smash_config", lambda: SmashConfig.from_json(folder), "smash_config.json",
                             *FIELDS, "SmashConfig", "key", "algorithm", "hyperparameter", "device")
    if isinstance(result, SmashConfig):
        _round_trips(result)
