"""Generated configs for MMRazor's channel-pruning types (#36): each builds and trains a step, or is refused clearly.

Fields come from each type's own keyword names plus a misspelt one; values from numbers, strings, lists and
nested dicts spelt like mutator configs. A case must succeed or raise a slimkit error with a message (never a
TypeError, KeyError or AttributeError from deep inside): the fuzz suite's rule (:func:`tests.fuzz._fuzz.clear_or_ok`).
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from slimkit.core import registry
from slimkit.razor import build
from tests.fuzz._fuzz import clear_or_ok, examples

ALGORITHMS = ["GroupFisherAlgorithm", "ItePruneAlgorithm", "DCFF", "DMCP", "SlimmableNetwork"]
MUTATORS = ["ChannelMutator", "OneShotChannelMutator", "SlimmableChannelMutator", "DCFFChannelMutator",
            "DMCPChannelMutator", "GroupFisherChannelMutator"]
UNITS = ["L1MutableChannelUnit", "SequentialMutableChannelUnit", "GroupFisherChannelUnit", "DCFFChannelUnit",
         "DMCPChannelUnit", "SlimmableChannelUnit", "OneShotMutableChannelUnit", "L2Unit"]
UNIT_NAMES = ["a_(0, 6)_6", "b_(0, 8)_8", "a", "b", "zz_(0, 4)_4"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2, 12), st.floats(-1, 2), st.floats(allow_nan=True),
                    st.sampled_from(["flops", "act", "none", "ratio", "number", "max", "min", "arch_random",
                                     "log_l1", "l2", "ChannelAnalyzer", "FxTracer", "", *MUTATORS, *UNITS]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.tuples(inner, inner, inner),
    st.dictionaries(st.sampled_from(["type", "channel_unit_cfg", "parse_cfg", "default_args", "units", "demo_input",
                                     "normalization_type", "choice_mode", "mutate_linear", "pruning_cfg",
                                     "candidate_choices", "init_args", *UNIT_NAMES]), inner, max_size=3)),
    max_leaves=8)


class Net(nn.Module):
    """conv a (3->6) -> bn -> conv b (6->8) -> bn -> pool -> fc: two prunable units, a and b."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.bn_a = nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6)
        self.b, self.bn_b = nn.Conv2d(6, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c = nn.Conv2d(8, 8, 1)
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn_b(self.b(F.relu(self.bn_a(self.a(x))))))
        return self.fc(F.adaptive_avg_pool2d(self.c(h), 1).flatten(1))


def fields(name: str) -> list[str]:
    params = inspect.signature(registry.get_component(name)).parameters
    return [p for p in params if p not in ("self", "architecture", "dummy_input", "kwargs")] + ["misspelt_field"]


def config(name: str) -> st.SearchStrategy[dict]:
    return st.dictionaries(st.sampled_from(fields(name)), values, max_size=4).map(lambda d: {"type": name, **d})


X = torch.rand(2, 3, 6, 6)


def _build_and_step(cfg: dict) -> None:
    if cfg["type"] in MUTATORS:
        build(cfg).prepare_from_supernet(Net(), X[:1])
        return
    algo = build(cfg, architecture=Net(), dummy_input=X[:1])
    losses = algo(X, torch.tensor([0, 1]), mode="loss")
    sum(losses.values()).backward()
    algo.eval()
    algo.deploy()(X)


@examples(12)
@given(st.sampled_from(ALGORITHMS + MUTATORS).flatmap(config))
def test_pruning_types_build_and_step_or_are_refused(cfg):
    clear_or_ok(f"razor {cfg['type']}", lambda: _build_and_step(cfg))
