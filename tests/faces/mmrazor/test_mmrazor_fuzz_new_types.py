"""Generated configs for the MMRazor types added for #36: each builds (and runs once) or is refused clearly.

Fields are drawn from each type's own keyword names plus a misspelt one, values from numbers, strings, lists and
dicts; a case must succeed or raise a slimkit error with a message (never a TypeError or an AttributeError from
deep inside). Uses the fuzz suite's rule (:func:`tests.fuzz._fuzz.clear_or_ok`).
"""

from __future__ import annotations

import inspect

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from slimkit.core import registry
from slimkit.engines.nas import DiffMutableOP, OneHotMutableOP
from slimkit.razor import DSNAS, Darts, build
from slimkit.training.distill import RecorderManager
from tests.fuzz._fuzz import clear_or_ok, examples

LOSSES = ["ABLoss", "KDSoftCELoss", "CrossEntropyLoss"]
CONNECTORS = ["TorchFunctionalConnector", "TorchNNConnector", "NormConnector", "BYOTConnector", "AutoformerBackbone"]
RECORDERS = ["MethodInputs", "FunctionInputs", "Parameter"]
ALGORITHMS = ["MMArchitectureQuant", "Darts", "DSNAS", "BigNAS", "AutoSlim", "SelfDistill", "Autoformer"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 300), st.floats(-2, 5), st.floats(allow_nan=True),
                    st.sampled_from(["avg_pool2d", "relu", "AvgPool2d", "Conv2d", "BN", "GN", "mean", "none",
                                     "sum", "NativeQuantizer", "TensorRTQuantizer", "ratio", "", "head.fc"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(st.sampled_from(
                                                         ["type", "bit", "kernel_size", "output_size", "qdtype",
                                                          "in_channels", "out_channels", "metrics", "lr"]), inner,
                                                         max_size=3)), max_leaves=6)


def fields(name: str) -> list[str]:
    params = inspect.signature(registry.get_component(name)).parameters
    extra = ["arch_setting"] if name == "AutoformerBackbone" else []  # drawn more often: it is required
    return [p for p in params if p not in ("self", "architecture")] + ["misspelt_field", *extra]


def config(name: str) -> st.SearchStrategy[dict]:
    return st.dictionaries(st.sampled_from(fields(name)), values, max_size=4).map(lambda d: {"type": name, **d})


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def _build_and_run(cfg: dict) -> None:
    obj = build(cfg)
    x = torch.rand(2, 4, 8, 8)
    if cfg["type"] in LOSSES:
        obj(x, x.clone())
    else:
        obj(x)


@examples(30)
@given(st.sampled_from(LOSSES + CONNECTORS).flatmap(config))
def test_new_losses_and_connectors_build_and_run_or_are_refused(cfg):
    clear_or_ok(f"razor {cfg['type']}", lambda: _build_and_run(cfg))


@examples(40)
@given(st.sampled_from(RECORDERS), values)
def test_new_recorders_bind_or_are_refused(kind, source):
    clear_or_ok(f"razor {kind}", lambda: RecorderManager({"r": {"type": kind, "source": source}}).initialize(Tiny()))


def _algorithm(cfg: dict) -> None:
    kind = cfg["type"]
    if kind in ("Darts", "DSNAS"):
        op = DiffMutableOP if kind == "Darts" else OneHotMutableOP
        net = nn.Sequential(op({"a": nn.Linear(4, 4), "b": nn.Identity()}), nn.Linear(4, 3))
        algo: Darts | DSNAS = build(cfg, architecture=net)
        algo(torch.rand(4, 4), torch.tensor([0, 1, 2, 0]), mode="loss")
        return
    arch = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(4, 3))
    build(cfg, architecture=arch if kind != "BigNAS" else {"type": "SearchableCNN", "stage_widths": [[4, 8]],
                                                           "strides": [1], "depth_choices": [0]})


@pytest.mark.slow
@examples(80)
@given(st.sampled_from(ALGORITHMS).flatmap(config))
def test_new_algorithms_build_or_are_refused(cfg):
    clear_or_ok(f"razor {cfg['type']}", lambda: _algorithm(cfg))


DARTS_CELL = {"type": "DartsBackbone", "in_channels": 4, "base_channels": 2, "num_layers": 3, "num_nodes": 2,
              "stem_multiplier": 1, "out_indices": (2,),
              "mutable_cfg": {"type": "DiffMutableOP", "candidates": {"skip": {"type": "DartsSkipConnect"},
                                                                      "pool": {"type": "DartsPoolBN",
                                                                               "pool_type": "max"}}},
              "route_cfg": {"type": "DiffChoiceRoute"}}
small_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-1, 5), st.floats(-1, 2),
                                      st.sampled_from(["max", "avg", "BN", "ReLU", "", "p0"])),
                            lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(
                                ["type", "kernel_size", "pool_type", "candidates", "num_chosen"]), inner, max_size=2)),
                            max_leaves=4)


def _darts_cell(kind: str, fields_: dict) -> None:
    if kind == "DartsBackbone":
        net = build({**DARTS_CELL, **fields_})
        net(torch.rand(2, 4, 8, 8))
    elif kind == "DiffChoiceRoute":
        route = build({"type": kind, "edges": {"p0": nn.Identity(), "p1": nn.Conv2d(4, 4, 1)}, **fields_})
        route([torch.rand(1, 4, 4, 4), torch.rand(1, 4, 4, 4)])
    else:
        op = build({"type": kind, "in_channels": 4, "out_channels": 4, **fields_})
        op(torch.rand(2, 4, 8, 8))


@pytest.mark.slow
@examples(60)
@given(st.sampled_from(["DartsBackbone", "DiffChoiceRoute", "DartsSepConv", "DartsDilConv", "DartsPoolBN",
                        "DartsSkipConnect", "DartsZero"]).flatmap(
    lambda kind: st.tuples(st.just(kind), st.dictionaries(st.sampled_from(fields(kind)), small_values, max_size=3))))
def test_darts_cell_types_build_and_run_or_are_refused(case):
    kind, fields_ = case
    clear_or_ok(f"razor {kind}", lambda: _darts_cell(kind, fields_))
