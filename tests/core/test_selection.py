"""One target/exclude vocabulary: exact names, glob patterns (full name or last part), op types by isinstance."""

from __future__ import annotations

from torch import nn

from slimkit.core.selection import is_pattern, matches, op_type_matches, select, unmatched


class Conv2dSame(nn.Conv2d):
    """A TF-'SAME' padding conv: a Conv2d subclass with its own forward."""


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = Conv2dSame(3, 8, 3)
        self.blocks = nn.Sequential(nn.Conv2d(8, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 1))
        self.head = nn.Linear(8, 2)


def test_exact_glob_and_last_part():
    assert matches("blocks.0", ["blocks.0"]) and not matches("blocks.0", ["blocks.2"])
    assert matches("encoder.layer.3.output.dense", ["*.output.dense"])
    assert matches("model.lm_head", ["lm_hea?"]) and not matches("model.lm_head", ["lm_head"])  # exact is exact
    assert matches("model.layers.0.q_proj", ["*proj"]) and not matches("model.layers.0.q_proj", ["q_proj"])
    assert matches("layer.11.attn", ["layer.1[0-1].*"]) and not matches("layer.9.attn", ["layer.1[0-1].*"])
    assert is_pattern("*.dense") and not is_pattern("blocks.0")


def test_op_types_match_subclasses():
    net = Net()
    assert op_type_matches(net.stem, ["Conv2d"]) and op_type_matches(net.stem, ["Conv2dSame"])
    assert not op_type_matches(net.head, ["Conv2d"])
    assert select(net, op_types=["Conv2d"]) == ["stem", "blocks.0", "blocks.2"]


def test_select_with_names_exclusions_and_typos():
    net = Net()
    assert select(net, op_types=["Conv2d", "Linear"], exclude=["head", "blocks.2"]) == ["stem", "blocks.0"]
    assert select(net, names=["blocks.*"], exclude=["*.1"]) == ["blocks.0", "blocks.2"]
    assert select(net, names=["blocks.0", "head"]) == ["blocks.0", "head"]
    names = [n for n, _ in net.named_modules() if n]
    assert unmatched(names, ["head", "blcks.*", "stem"]) == ["blcks.*"]
