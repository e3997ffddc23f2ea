"""Generated configs for the BigNAS / once-for-all types: each builds and runs once, or is refused clearly.

Fields of our tiny BigNAS config's backbone, classifier and head are replaced by drawn values (numbers, strings,
lists, dicts, misspelt names); a case must succeed or raise a slimkit error with a message, never a TypeError or an
IndexError from deep inside (the fuzz suite's rule, :func:`tests.fuzz._fuzz.clear_or_ok`).
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from slimkit.core import registry
from slimkit.razor import build, load_config
from tests.fuzz._fuzz import clear_or_ok, examples

TINY = load_config(Path(__file__).parent / "configs" / "nas" / "bignas_attentive_mobilenet_tiny_supernet.py")
BASES = {"AttentiveMobileNetV3": TINY.nas_backbone, "SearchableImageClassifier": TINY.supernet,
         "DynamicLinearClsHead": TINY.supernet.head, "SqueezeMeanPoolingWithDropout": TINY.supernet.neck,
         "GlobalAveragePooling": {"type": "GlobalAveragePooling"}, "LabelSmoothLoss": TINY.supernet.head.loss,
         "OneShotMutableValue": {"type": "OneShotMutableValue", "value_list": [3, 5]}}

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2, 9), st.floats(-1, 2),
                    st.sampled_from(["OFAConv2d", "BigNasConv2d", "HSwish", "ReLU", "original", "", "x"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(
    ["type", "momentum", "input_sizes", "kernel_size", "num_blocks", "expand_ratio", "num_out_channels"]), inner,
    max_size=3)), max_leaves=8)


def fields(name: str) -> list[str]:
    return [p for p in inspect.signature(registry.get_component(name)).parameters if p != "self"] + ["misspelt"]


def _run(kind: str, changes: dict) -> None:
    obj = build({**BASES[kind], **changes})
    if kind in ("AttentiveMobileNetV3", "SearchableImageClassifier"):
        obj(torch.rand(2, 3, 32, 32))
    elif kind == "DynamicLinearClsHead":
        obj.loss((torch.rand(2, 48),), torch.tensor([0, 4]))
    elif kind == "LabelSmoothLoss":
        obj(torch.randn(2, 5), torch.tensor([1, 3]))
    elif kind != "OneShotMutableValue":
        obj(torch.rand(2, 4, 3, 3))


@pytest.mark.slow
@examples(80)
@given(st.sampled_from(sorted(BASES)).flatmap(
    lambda kind: st.tuples(st.just(kind), st.dictionaries(st.sampled_from(fields(kind)), values, max_size=2))))
def test_bignas_types_build_and_run_or_are_refused(case):
    kind, changes = case
    clear_or_ok(f"razor {kind}", lambda: _run(kind, changes))
