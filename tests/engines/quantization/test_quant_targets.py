"""The NNI-shaped Quantizer on the shared target definition: Conv1D, Linear subclasses, MultiheadAttention."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from slimkit.engines.quantization import (
    QATEngine,
    QuantizedLayer,
    quantized_layer_specs,
    rebuild_quantized_layers,
)
from slimkit.engines.quantization.config import QuantizationConfigError

WEIGHTS = [{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["default"]}]


class SubLinear(nn.Linear):
    """A Linear subclass whose forward is x W^T + b (like Falcon's)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.T + self.bias


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = Conv1D(12, 8)  # 8 -> 12, weight stored [8, 12]
        self.attn = nn.MultiheadAttention(12, 2, batch_first=True)
        self.sub = SubLinear(12, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        h = self.attn(h, h, h, need_weights=False)[0]
        return self.sub(h)


def _x() -> torch.Tensor:
    return torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1))


def test_default_takes_conv1d_and_subclasses_and_leaves_multihead_out_proj():
    model = Net()
    quantizer = QATEngine(model, WEIGHTS, per_channel=True)
    assert sorted(w.name for w in quantizer.get_modules_wrapper()) == ["proj", "sub"]
    conv1d = next(w for w in quantizer.get_modules_wrapper() if w.name == "proj")
    assert conv1d.weight_scale.shape == (12, 1)  # one scale per OUTPUT channel, although the weight is [in, out]
    model(_x())  # runs: MultiheadAttention still reads its own out_proj.weight
    record = quantizer.coverage()
    left = {x["name"]: x["reason"] for x in record["left"]}
    assert record["quantized_layers"] == 2
    assert list(left) == ["attn.out_proj"] and "reads its out_proj weight directly" in left["attn.out_proj"]


def test_naming_an_unsupported_layer_is_an_error_with_the_fix():
    config = [{"quant_types": ["weight"], "quant_bits": 8, "op_types": ["Linear"]}]
    with pytest.raises(QuantizationConfigError, match=r"selects layer 'attn.out_proj' .*reads its out_proj weight "
                                                      r"directly\. Add \{'exclude': True, 'op_names': "):
        QATEngine(Net(), config)


def test_conv1d_freezes_per_output_channel_and_reloads_exactly():
    model = Net().eval()
    x = _x()
    quantizer = QATEngine(model, WEIGHTS, per_channel=True)
    with torch.no_grad():
        before = model(x)
    state = quantizer.quantized_state_dict()
    assert state["proj.weight"].shape == (8, 12)  # exported in Conv1D's own layout
    quantizer.freeze()
    frozen = model.proj
    assert isinstance(frozen, QuantizedLayer) and frozen.weight_codes.shape == (12, 8)
    codes = frozen.weight_codes.float()
    assert all(int(row.max()) == 255 or int(row.min()) == 0 for row in codes)  # each output row spans its range
    with torch.no_grad():
        after = model(x)
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-5)
    fresh = rebuild_quantized_layers(Net(), quantized_layer_specs(model))
    fresh.load_state_dict(model.state_dict(), strict=True)
    with torch.no_grad():
        assert torch.equal(fresh.eval()(x), after)
