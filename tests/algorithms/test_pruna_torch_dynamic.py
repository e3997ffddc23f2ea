"""int8_dynamic (Pruna's torch_dynamic): per-token activation scales against torch.ao's one scale per call."""

from __future__ import annotations

import json

import pytest
import torch
import torch.ao.nn.quantized.dynamic as nnqd

from slimkit import SmashConfig, SmashedModel, smash
from slimkit.engines.quantization.int8.dynamic import quantize_named
from slimkit.engines.quantization.int8.per_token import PerTokenInt8Linear, per_token_activations


def _pair(bias: bool = True) -> tuple[torch.nn.Module, torch.nn.Module, torch.nn.Module]:
    """An fp32 Linear, its torch.ao dynamic int8 copy (per-tensor activations) and its per-token copy."""
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(64, 32, bias=bias))
    with torch.no_grad():
        if bias:
            base[0].bias.mul_(10)
    per_tensor = quantize_named(_copy(base), ["0"], per_channel=True)
    per_token = per_token_activations(quantize_named(_copy(base), ["0"], per_channel=True), ["0"])
    return base, per_tensor, per_token


def _copy(model: torch.nn.Module) -> torch.nn.Module:
    clone = torch.nn.Sequential(torch.nn.Linear(64, 32, bias=model[0].bias is not None))
    clone.load_state_dict(model.state_dict())
    return clone


def _rel_error(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a - b).norm(dim=-1) / b.norm(dim=-1)


def test_an_outlier_token_does_not_coarsen_the_other_tokens():
    base, per_tensor, per_token = _pair(bias=False)
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(1))
    x[0] *= 1000.0  # one outlier token: one scale per call spends its 255 levels on it
    with torch.no_grad():
        ref, tensor_out, token_out = base(x), per_tensor(x), per_token(x)
    assert isinstance(per_token[0], PerTokenInt8Linear) and type(per_tensor[0]) is nnqd.Linear
    assert _rel_error(token_out[1:], ref[1:]).max() < 0.02  # 8-bit (or 7-bit) codes of each token's own range
    assert _rel_error(tensor_out[1:], ref[1:]).min() > 0.3  # the other tokens rounded to a few levels
    assert _rel_error(token_out[:1], ref[:1]).item() < 0.02


def test_bias_zero_rows_batches_and_dtype():
    base, _, per_token = _pair(bias=True)
    x = torch.randn(2, 3, 64, generator=torch.Generator().manual_seed(2))
    x[0, 1] = 0.0  # an all-zero token: the output is the bias exactly
    with torch.no_grad():
        ref, out = base(x), per_token(x)
        half = per_token(x.bfloat16())
    assert out.shape == (2, 3, 32) and torch.isfinite(out).all()
    assert torch.allclose(out[0, 1], base[0].bias, atol=1e-5)
    assert _rel_error(out, ref).max() < 0.02
    assert half.dtype == torch.bfloat16
    assert "activation_scales=per_token" in repr(per_token[0])
    with pytest.raises(TypeError, match="not a torch.ao dynamic int8 Linear"):
        per_token_activations(base, ["0"])


def test_bias_is_unpacked_again_after_loading_a_state_dict():
    base, _, per_token = _pair(bias=True)
    other = per_token_activations(quantize_named(torch.nn.Sequential(torch.nn.Linear(64, 32)), ["0"], True), ["0"])
    other.load_state_dict(per_token.state_dict())
    assert torch.equal(other[0].float_bias, per_token[0].float_bias)
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.equal(other(x), per_token(x))


def test_saves_record_the_activation_scales_and_old_saves_replay_per_tensor(tmp_path):
    base, _, _ = _pair(bias=True)
    cfg = SmashConfig({"int8_dynamic": {}}, device="cpu")
    smashed = smash(_copy(base), cfg, verbose=False)
    assert isinstance(smashed.model[0], PerTokenInt8Linear)
    smashed.save_pretrained(tmp_path / "new")
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(4))
    reloaded = SmashedModel.from_pretrained(tmp_path / "new", model=torch.nn.Sequential(torch.nn.Linear(64, 32)))
    assert isinstance(reloaded.model[0], PerTokenInt8Linear)
    with torch.no_grad():
        assert torch.equal(reloaded(x), smashed(x))
    # a save from before per-token scales: no activation_scales in its state, torch.ao's per-call scale
    saved = json.loads((tmp_path / "new" / "smash_config.json").read_text())
    del saved["applied"][0]["state"]["activation_scales"]
    (tmp_path / "new" / "smash_config.json").write_text(json.dumps(saved))
    old = SmashedModel.from_pretrained(tmp_path / "new", model=torch.nn.Sequential(torch.nn.Linear(64, 32)))
    assert type(old.model[0]) is nnqd.Linear
