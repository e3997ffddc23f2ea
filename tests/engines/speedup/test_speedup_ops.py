from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from slimkit.engines.speedup import ModelSpeedup, UnsupportedOpError, channel_dependency_report
from tests.engines.speedup.speedup_models import check_equivalence, row_mask, seeded


class SENet(nn.Module):
    """Squeeze-and-excitation: global mean -> fc -> fc -> sigmoid gate multiplied into the channels."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc1 = nn.Linear(8, 4)
        self.fc2 = nn.Linear(4, 8)
        self.out = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        s = torch.sigmoid(self.fc2(torch.relu(self.fc1(y.mean((2, 3))))))
        return self.out(y * s.view(s.size(0), -1, 1, 1))


class TokenConcat(nn.Module):
    """Two projections concatenated along tokens (not channels) and stacked: their channels are tied."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 8)
        self.b = nn.Linear(6, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.cat([torch.relu(self.a(x)), torch.relu(self.b(x))], dim=1)
        return self.head(torch.stack([h, 2 * h], dim=0).sum(0))


class Conv1dNet(nn.Module):
    """1-D conv, pad, upsample, pool, then channels moved last for a Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3)
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.avg_pool1d(F.interpolate(F.pad(torch.relu(self.conv(x)), (1, 1)), scale_factor=2.0), 2)
        return self.fc(y.transpose(1, 2))


class DepthMultiplier(nn.Module):
    """Depthwise conv with 2 output channels per input channel."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.dw = nn.Conv2d(4, 8, 3, padding=1, groups=4)
        self.bn = nn.BatchNorm2d(8)
        self.out = nn.Conv2d(8, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.bn(self.dw(self.conv(x)))))


class SelfSimilarity(nn.Module):
    """softmax(h @ h^T) @ h: a contraction over channels, then channels carried by the right operand."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        return self.head(torch.softmax(h @ h.transpose(1, 2), dim=-1) @ h)


class MyAttention(nn.Module):
    """A user-written attention block in the Hugging Face layout (q/k/v/o_proj, head_dim, reshape with -1)."""

    def __init__(self, dim: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.head_dim = dim // heads
        self.num_heads = heads
        self.q_proj, self.k_proj = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.v_proj, self.o_proj = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, -1, self.head_dim).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        return self.o_proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, -1))


class AttentionNet(nn.Module):
    def __init__(self, block: type[nn.Module]) -> None:
        super().__init__()
        self.inp = nn.Linear(5, 16)
        self.att = block()
        self.out = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.att(self.inp(x)))


class FixedHeadsAttention(MyAttention):
    """The same block with a different head attribute name, so it is not recognised: traced op by op."""

    def __init__(self) -> None:
        super().__init__()
        self.d, self.h = self.head_dim, self.num_heads
        del self.head_dim, self.num_heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, self.h, self.d).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        return self.o_proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, -1))


def test_squeeze_excitation_ties_gate_to_channels(tmp_path):
    model, keep = seeded(SENet), [0, 2, 3, 6, 7]
    masks = {"conv": row_mask(model.conv, keep), "fc2": row_mask(model.fc2, keep), "fc1": row_mask(model.fc1, [1, 3])}
    speedup, _ = check_equivalence(SENet, model, torch.randn(2, 3, 6, 6), masks, tmp_path)
    kept = speedup.kept_channels
    assert kept["fc1"] == {"out": [1, 3], "in": keep} and kept["fc2"] == {"out": keep, "in": [1, 3]}
    assert kept["out"]["in"] == keep and kept["bn"]["out"] == keep


def test_token_concat_and_stack_tie_the_projections(tmp_path):
    model = seeded(TokenConcat)
    masks = {"a": row_mask(model.a, [0, 1, 2, 5]), "b": row_mask(model.b, [1, 2, 5, 6])}
    with pytest.warns(UserWarning, match="coupled"):
        speedup, _ = check_equivalence(TokenConcat, model, torch.randn(2, 5, 6), masks, tmp_path)
    assert speedup.kept_channels["head"]["in"] == [0, 1, 2, 5, 6] == speedup.kept_channels["b"]["out"]


def test_conv1d_with_pad_interpolate_pool_and_transpose(tmp_path):
    model = seeded(Conv1dNet)
    speedup, _ = check_equivalence(Conv1dNet, model, torch.randn(2, 4, 10), {"conv": row_mask(model.conv, [1, 4, 5])},
                                   tmp_path)
    assert speedup.kept_channels["fc"]["in"] == [1, 4, 5] and model.fc.in_features == 3


def test_depthwise_with_channel_multiplier(tmp_path):
    model = seeded(DepthMultiplier)
    masks = {"conv": row_mask(model.conv, [0, 2])}
    speedup, _ = check_equivalence(DepthMultiplier, model, torch.randn(1, 3, 5, 5), masks, tmp_path)
    assert speedup.kept_channels["dw"] == {"out": [0, 1, 4, 5], "in": [0, 2]}
    assert (model.dw.groups, model.dw.out_channels, model.bn.num_features, model.out.in_channels) == (2, 4, 4, 4)


def test_matmul_contraction_over_channels(tmp_path):
    model = seeded(SelfSimilarity)
    masks = {"proj": row_mask(model.proj, [0, 3, 4])}
    speedup, _ = check_equivalence(SelfSimilarity, model, torch.randn(2, 5, 6), masks, tmp_path)
    assert speedup.kept_channels["head"]["in"] == [0, 3, 4]


def test_user_attention_block_in_hf_layout_prunes_heads(tmp_path):
    torch.manual_seed(0)
    model = AttentionNet(MyAttention).eval()
    rows = list(range(4, 12))  # keep heads 1 and 2 in q, k and v
    masks = {f"att.{p}_proj": row_mask(getattr(model.att, f"{p}_proj"), rows) for p in "qkv"}
    speedup, _ = check_equivalence(lambda: AttentionNet(MyAttention), model, torch.randn(2, 3, 5), masks, tmp_path)
    assert speedup.kept_channels["att"] == {"heads": [1, 2], "kv_heads": [1, 2]} and model.att.num_heads == 2
    assert model.att.o_proj.in_features == 8


def test_unrecognised_attention_splitting_channels_into_heads_is_refused():
    torch.manual_seed(0)
    model = AttentionNet(FixedHeadsAttention).eval()
    x = torch.randn(2, 3, 5)
    report = channel_dependency_report(model, x)
    for layer in ("att.q_proj", "att.k_proj", "att.v_proj"):
        assert "view at att" in report.infos[report.index([layer])].constraints
    masks = {"att.v_proj": row_mask(model.att.v_proj, list(range(8)))}
    with pytest.raises(UnsupportedOpError, match=r"`view` at 'att'.*splits the channel dimension.*'op_names': "
                                                 r"\['att.v_proj'\]"):
        ModelSpeedup(model, x, masks).speedup_model()
