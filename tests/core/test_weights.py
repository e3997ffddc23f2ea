"""The one target definition (slimkit.core.weights) and the coverage record (slimkit.core.coverage)."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from slimkit.core.coverage import coverage, coverage_summary, refusal
from slimkit.core.weights import (
    CONV1D,
    DENSE,
    EXPERTS,
    LINEAR,
    find_targets,
    linear_probe,
    select,
    unsupported_reason,
    weight_of,
)


class Plain(nn.Linear):
    """A subclass computing exactly x W^T + b (like Falcon's FalconLinear)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.T + self.bias


class Doubling(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * super().forward(x)


class Routing(nn.Linear):
    """Returns a tuple, as Llama 4's router does."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = super().forward(x)
        return tuple(logits.topk(1, dim=-1))


class Experts(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.num_experts = 3
        self.gate_up_proj = nn.Parameter(torch.randn(3, 8, 4))
        self.down_proj = nn.Parameter(torch.randn(3, 4, 4))


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.plain = Plain(4, 6)
        self.doubling = Doubling(4, 4)
        self.routing = Routing(4, 4)
        self.conv1d = Conv1D(5, 4)  # nf=5 outputs, nx=4 inputs: weight [4, 5]
        self.attn = nn.MultiheadAttention(4, 2)
        self.experts = Experts()
        self.lm_head = nn.Linear(4, 10, bias=False)


def test_targets_kinds_and_layouts():
    model = Model()
    found = {t.name: t for t in find_targets(model)}
    assert sorted(found) == ["attn.out_proj", "conv1d", "doubling", "experts", "lm_head", "plain", "routing"]
    assert found["conv1d"].kind == CONV1D and tuple(weight_of(model.conv1d).shape) == (5, 4)
    assert found["experts"].kind == EXPERTS and found["experts"].params == ("gate_up_proj", "down_proj")
    assert found["experts"].numel == 3 * 8 * 4 + 3 * 4 * 4
    assert found["plain"].kind == LINEAR and found["plain"].unsupported is None
    assert "reads its out_proj weight directly" in found["attn.out_proj"].unsupported
    assert [t.name for t in find_targets(model, [CONV1D])] == ["conv1d"]


def test_the_probe_refuses_subclasses_whose_forward_is_not_linear():
    model = Model()
    assert linear_probe(model.plain) is None and linear_probe(model.lm_head) is None
    assert "relative difference 1 on a random input" in unsupported_reason(model.doubling)
    assert "returned tuple, expected (2, 4)" in unsupported_reason(model.routing)
    frozen = Plain(4, 4).to(torch.float16)
    frozen.weight.requires_grad_(False)
    assert linear_probe(frozen) is None  # half-precision subclasses pass within a half-precision tolerance
    int_weight = nn.Linear(4, 4)
    int_weight.weight = nn.Parameter(torch.zeros(4, 4, dtype=torch.int8), requires_grad=False)
    assert "not a 2-D floating-point tensor" in unsupported_reason(int_weight)


def test_the_probe_is_cached_until_the_weight_changes():
    layer = Doubling(4, 4)
    first = linear_probe(layer)
    with torch.no_grad():
        layer.weight.zero_()  # zero weight: 2 * 0 == 0, so the doubling is invisible now
        layer.bias.zero_()
    assert first is not None and linear_probe(layer) is None


def test_select_and_refusal_name_the_types_found():
    model = Model()
    targets = find_targets(model)
    assert [t.name for t in select(targets, DENSE, ["lm_head"])] == ["plain", "conv1d"]
    message = refusal(targets, DENSE, ["plain", "conv1d", "lm_head"], "rtn")
    assert message.startswith("rtn: no layer to quantize: found ")
    assert "1 x Experts (experts) not handled by this quantizer" in message
    assert "1 x Plain (linear), 1 x Conv1D (conv1d), 1 x Linear (linear) excluded by ['plain', 'conv1d', 'lm_head']" \
        in message
    assert "Doubling.forward is not x W^T + b" in message and message.endswith("Loosen the 'exclude' patterns.")
    only = nn.Sequential(nn.Linear(2, 2))
    assert refusal(find_targets(only), DENSE, ["*"]) == ("No layer to quantize: found 1 x Linear (linear), all "
                                                         "excluded by ['*']. Loosen the 'exclude' patterns.")


def test_coverage_record_reasons_and_shares():
    model = Model()
    targets = find_targets(model)
    record = coverage(targets, ["plain", "conv1d"], ["lm_head"], ["lm_head"],
                      reasons={"conv1d": "ignored: quantized wins"})
    json.dumps(record)  # JSON-ready
    numel = {t.name: t.numel for t in targets}
    assert record["quantized_layers"] == 2 and record["quantized_params"] == numel["plain"] + numel["conv1d"]
    assert record["linear_like_params"] == sum(numel.values())
    left = {x["name"]: x["reason"] for x in record["left"]}
    assert left["lm_head"] == "kept by design (default exclude ['lm_head'])"
    assert left["experts"] == "unsupported: Experts (experts) is not handled by this quantizer"
    assert left["doubling"].startswith("unsupported: Doubling.forward")
    assert record["excluded_params"] == numel["lm_head"]
    assert record["share_not_excluded"] == pytest.approx(
        record["quantized_params"] / (record["linear_like_params"] - numel["lm_head"]), abs=1e-6)
    assert record["by_kind"][EXPERTS] == {"targets": 1, "params": numel["experts"], "quantized_params": 0}
    user = coverage(targets, [], ["lm_head", "plain"], ["lm_head"])
    assert {x["name"]: x["reason"] for x in user["left"]}["plain"] == "excluded by the user's pattern ['plain']"
    lines = coverage_summary(record)
    assert lines[0].startswith("quantized 2 layers, ")
    assert any(line.startswith("left 1 (40 params: lm_head): kept by design") for line in lines)
