import pytest
import torch

from slimkit import zoo
from slimkit.engines.quantization.lowbit import (
    ActivationStats,
    HessianAccumulator,
    fake_quantize,
    quantize_gptq,
    quantize_hqq,
    quantize_rtn,
    search_scale,
)
from slimkit.engines.quantization.lowbit.awq import fold_inverse_scale, scale_weight
from slimkit.engines.quantization.lowbit.rtn import dequantize_codes, grouped


def _dequant(q, s, z, group):
    out_f, in_f = q.shape
    return dequantize_codes(grouped(q, group), s.float().unsqueeze(-1), z.float().unsqueeze(-1)).reshape(out_f, -1)[
        :, :in_f
    ]


@pytest.fixture(scope="module")
def llama_activations():
    """Real inputs of every Linear of the tiny Llama on 48 x 32 random tokens (40 sequences to fit, 8 held out)."""
    torch.manual_seed(0)
    model = zoo.load("tiny_llama").model.eval()
    ids = torch.randint(0, 256, (48, 32), generator=torch.Generator().manual_seed(1))
    inputs: dict[str, list[torch.Tensor]] = {}

    def keep(name, args):
        inputs.setdefault(name, []).append(args[0].reshape(-1, args[0].shape[-1]))

    hooks = [m.register_forward_pre_hook(lambda _m, a, n=n: keep(n, a))
             for n, m in model.named_modules() if type(m) is torch.nn.Linear and "layers" in n]
    with torch.no_grad():
        for row in ids:
            model(input_ids=row[None])
    for h in hooks:
        h.remove()
    return model, {n: (torch.cat(x[:40]), torch.cat(x[40:])) for n, x in inputs.items()}


@pytest.mark.parametrize("act_order", [False, True])
@pytest.mark.parametrize("bits", [3, 4])
def test_gptq_lowers_layer_reconstruction_error_below_rtn(llama_activations, act_order, bits):
    model, acts = llama_activations
    wins = 0
    for name, (fit, held_out) in acts.items():
        w = model.get_submodule(name).weight.detach()
        acc = HessianAccumulator(w.shape[1])
        acc.add(fit)
        q, s, z = quantize_gptq(w, acc.h, bits, 32, act_order=act_order)
        gptq = _dequant(q, s, z, 32)
        rtn = fake_quantize(w, bits, 32)
        for x, strict in ((fit, True), (held_out, False)):
            err_gptq = (x @ (w - gptq).t()).pow(2).sum()
            err_rtn = (x @ (w - rtn).t()).pow(2).sum()
            if strict:
                assert err_gptq < err_rtn, name
            else:
                wins += int(err_gptq < err_rtn)
    assert wins == len(acts)  # also better on tokens it never saw


def test_hessian_accumulator_is_two_over_n_x_transpose_x():
    x1, x2 = torch.randn(2, 5, 6), torch.randn(7, 6)
    acc = HessianAccumulator(6)
    acc.add(x1)
    acc.add(x2)
    rows = torch.cat([x1.reshape(-1, 6), x2])
    torch.testing.assert_close(acc.h, 2 * rows.t() @ rows / rows.shape[0])
    assert acc.count == 17


def test_gptq_survives_a_singular_hessian_and_dead_inputs():
    w = torch.randn(8, 16)
    x = torch.randn(4, 16)
    x[:, 3] = 0  # a dead input channel and fewer samples than channels: H is singular
    acc = HessianAccumulator(16)
    acc.add(x)
    q, s, z = quantize_gptq(w, acc.h, 4, 8, damp=0.01)
    assert q.shape == (8, 16) and int(q.max()) <= 15 and torch.isfinite(s.float()).all()


def test_hqq_lowers_the_lp_error_of_heavy_tailed_weights():
    gen = torch.Generator().manual_seed(0)
    w = torch.distributions.StudentT(3.0).sample((64, 256)) * 0.02
    torch.manual_seed(0)
    q, s, z = quantize_hqq(w, 4, 64, iters=20)
    rq, rs, rz = quantize_rtn(w, 4, 64)
    err = (w - _dequant(q, s, z, 64)).abs().pow(0.7).sum()
    err_rtn = (w - _dequant(rq, rs, rz, 64)).abs().pow(0.7).sum()
    assert err < 0.97 * err_rtn
    assert not torch.equal(z.float().round(), z.float())  # zeros are fractional, unlike RTN's
    del gen


def test_hqq_scale_refit_is_no_worse_in_lp_than_zero_only():
    w = torch.randn(32, 128) * 0.05
    zero_only = _dequant(*quantize_hqq(w, 3, 64), 64)
    both = _dequant(*quantize_hqq(w, 3, 64, optimize_scale=True), 64)
    assert (w - both).abs().pow(0.7).sum() <= (w - zero_only).abs().pow(0.7).sum() * 1.02


def test_awq_scale_search_protects_salient_channels():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(512, 128, generator=gen)
    x[:, :4] *= 30  # four salient input channels
    w = torch.randn(64, 128, generator=gen) * 0.05
    stats = ActivationStats(128)
    stats.add(x[:256])
    stats.add(x[256:])
    torch.testing.assert_close(stats.h, x.t() @ x / 512)
    s, alpha = search_scale(stats, [w], 3, 64, sym=False, n_grid=10)
    assert alpha > 0 and s[:4].min() > s[4:].max()
    ref = x @ w.t()
    err_awq = ((x / s) @ fake_quantize(w * s, 3, 64).t() - ref).pow(2).mean()
    err_rtn = (x @ fake_quantize(w, 3, 64).t() - ref).pow(2).mean()
    assert err_awq < 0.9 * err_rtn


def test_awq_folding_into_the_norm_keeps_the_float_model_exact():
    model = zoo.load("tiny_llama").model.eval()
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        before = model(input_ids=ids).logits
        layer = model.model.layers[0]
        s = torch.rand(64, generator=torch.Generator().manual_seed(4)) * 3 + 0.2
        for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
            scale_weight(proj, s)
        fold_inverse_scale(layer.input_layernorm, s)
        s2 = torch.rand(128, generator=torch.Generator().manual_seed(5)) + 0.5
        scale_weight(layer.mlp.down_proj, s2)
        fold_inverse_scale(layer.mlp.up_proj, s2)
        after = model(input_ids=ids).logits
    torch.testing.assert_close(after, before, atol=1e-4, rtol=1e-4)


class _Norm(torch.nn.Module):
    def __init__(self, one_plus: bool):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(8) + 0.5)
        self.one_plus = one_plus

    def forward(self, x):
        return x * ((1 + self.weight) if self.one_plus else self.weight)


@pytest.mark.parametrize("one_plus", [False, True])
def test_awq_fold_is_verified_and_undone_when_not_exact(one_plus):
    from slimkit.engines.quantization.lowbit.quantize import _AWQ

    torch.manual_seed(0)
    model = torch.nn.Sequential(_Norm(one_plus), torch.nn.Linear(8, 4))
    x = torch.randn(3, 8)
    norm_before, lin_before = model[0].weight.detach().clone(), model[1].weight.detach().clone()
    s = torch.rand(8) + 0.5
    plans = _AWQ._scale(model, [(["1"], s, torch.ones(8), model[0])], probe=lambda: model(x))
    torch.testing.assert_close(model[1].weight, lin_before * s)  # the layer is scaled either way
    if one_plus:  # dividing the weight of a (1 + w) norm is not exact: restored, 1/s goes to the input instead
        assert plans[0][3] is None and torch.equal(model[0].weight, norm_before)
    else:
        assert plans[0][3] is model[0]
        torch.testing.assert_close(model[0].weight, norm_before / s)
