from __future__ import annotations

import warnings

import pytest
import torch

from slimkit import SmashConfig, SmashedModel, smash
from slimkit.engines.quantization.int8.fallback import restore_until
from slimkit.engines.quantization.int8.static_fx import (
    ClampedHistogramObserver,
    SaturationSafeWeightObserver,
    calibrate,
    convert,
    prepare,
    qconfig_mapping,
)
from slimkit.errors import ConfigError
from slimkit.evaluation import fidelity
from tests.algorithms.testers.calibrated_int8 import SensitiveCNN


@pytest.fixture(scope="module")
def sensitive():
    torch.manual_seed(0)
    return SensitiveCNN().eval(), torch.randn(16, 3, 8, 8)


def _smash(model, images, **hyperparameters):
    cfg = SmashConfig({"int8_static": hyperparameters}, device="cpu")
    cfg.add_example_inputs(images)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return smash(model, cfg, verbose=False)


def test_fallback_keeps_the_sensitive_layer_fp32_meets_the_budget_and_reloads_identically(sensitive, tmp_path):
    model, images = sensitive
    smashed = _smash(model, images, min_cosine=0.99)
    state = smashed.applied[0]["state"]
    assert state["fp32_layers"] == ["conv2"] and state["cosine_all_int8"] < 0.9 <= 0.99 <= state["cosine"]
    assert fidelity(model, smashed, images).cosine_mean >= 0.99  # the budget holds on the calibration images
    assert not any(".quantized" in type(m).__module__ for m in smashed.model.conv2.modules())
    smashed.save_pretrained(tmp_path / "m")
    again = SmashedModel.from_pretrained(tmp_path / "m", model=SensitiveCNN)
    assert again.applied[0]["state"]["fp32_modules"] == ["conv2", "act2"]
    fresh = torch.randn(8, 3, 8, 8)
    assert torch.equal(again(fresh), smashed(fresh)) and torch.equal(again(images), smashed(images))


def test_fallback_off_keeps_every_layer_int8(sensitive):
    model, images = sensitive
    state = _smash(model, images, min_cosine=0.99, max_fp32_layers=0).applied[0]["state"]
    assert state["fp32_layers"] == [] and state["cosine"] == state["cosine_all_int8"] < 0.9
    assert state["quantized_modules"] == 3  # conv1, conv2 (+ReLU), fc


def test_an_unreachable_budget_stops_at_the_cap_and_warns(sensitive):
    model, images = sensitive
    cfg = SmashConfig({"int8_static": {"min_cosine": 1.0, "max_fp32_layers": 1}}, device="cpu")
    cfg.add_example_inputs(images)
    with pytest.warns(UserWarning, match=r"kept 1 layers in fp32 \(max_fp32_layers=1\).*< min_cosine=1\.0"):
        smashed = smash(model, cfg, verbose=False)
    assert smashed.applied[0]["state"]["fp32_layers"] == ["conv2"]


def test_bias_correction_brings_the_mean_output_back_to_fp32(sensitive):
    model, images = sensitive
    with torch.no_grad():
        reference = model(images).mean(0)
        errors = {bc: float((_smash(model, images, bias_correction=bc, max_fp32_layers=0)(images).mean(0) - reference)
                            .abs().max()) for bc in (False, True)}
    assert errors[True] < 0.2 * errors[False]


@pytest.mark.parametrize(("key", "value", "fragment"), [
    ("min_cosine", 1.5, r"a float in \[0\.5, 1\.0\]"),
    ("min_cosine", 0.1, r"a float in \[0\.5, 1\.0\]"),
    ("max_fp32_layers", -1, r"an integer in \[0, 100000\]"),
    ("max_fp32_layers", 2.5, r"an integer in \[0, 100000\]"),
    ("bias_correction", "yes", r"one of True, False"),
])
def test_bad_hyperparameters_say_what_is_allowed(key, value, fragment):
    with pytest.raises(ConfigError, match=rf"Invalid value .* for 'int8_static_{key}': allowed is {fragment}"):
        SmashConfig({"int8_static": {key: value}})


def test_weight_levels_never_let_a_pair_of_int8_products_saturate():
    import torch.ao.nn.quantized as nnq

    torch.manual_seed(0)
    weight = torch.randn(64, 1, 3, 3)
    weight[:8] = 1.0  # every tap equal: the worst case for int16 pair sums
    weight[8:16] = 0.01
    weight[8:16, :, 0, 0] = 1.0  # one dominant tap: nearly all 127 levels
    observer = SaturationSafeWeightObserver()
    observer(weight)
    scale, zero = observer.calculate_qparams()
    q = torch.quantize_per_channel(weight, scale.double(), zero, 0, torch.qint8)
    top2 = q.int_repr().abs().reshape(64, -1).int().topk(2, dim=1).values.sum(1)
    assert int(top2.max()) <= 127 and set(observer.levels[:8].tolist()) == {63.0}
    assert set(observer.levels[8:16].tolist()) == {125.0}  # floor(127 / (1 + 0.01))
    conv = nnq.Conv2d(64, 64, 3, padding=1, groups=64)  # fbgemm's depthwise kernel pairs taps in int16
    conv.set_weight_bias(q, None)
    conv.scale, conv.zero_point = 4.0, 0
    x = torch.quantize_per_tensor(torch.full((1, 64, 6, 6), 255.0), 1.0, 0, torch.quint8)
    exact = torch.nn.functional.conv2d(x.dequantize(), q.dequantize(), None, 1, 1, 1, 64)
    assert torch.allclose(conv(x).dequantize(), exact.clamp(0, 255 * 4.0), atol=2.0)  # one 4.0 step at most


class _ConvBnRelu6(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.act = torch.nn.ReLU6()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


def test_relu6_outputs_are_observed_as_clipped():
    torch.manual_seed(0)
    model, images = _ConvBnRelu6().eval(), [torch.randn(8, 3, 8, 8) * 10]
    mapping = qconfig_mapping("histogram", [])
    prepared = prepare(model, mapping, images[0][:1], "histogram")
    clamped = [m for m in prepared.modules() if isinstance(m, ClampedHistogramObserver)]
    assert len(clamped) == 1 and (clamped[0].lo, clamped[0].hi) == (0.0, 6.0)
    calibrate(prepared, images)
    quantized = convert(prepared, mapping, [])
    assert quantized.conv.zero_point == 0 and quantized.conv.scale <= 6.0 / 255 * 1.01  # all 256 levels in [0, 6]


def test_restore_until_keeps_only_layers_that_help():
    gains = {"a": 0.05, "b": -0.01, "c": 0.02, "d": 0.5}
    evaluate = lambda layers: 0.9 + sum(gains[n] for n in layers)  # noqa: E731
    assert restore_until(["a", "b", "c", "d"], evaluate, budget=0.96, start=0.9) == (pytest.approx(0.97), ["a", "c"])
    assert restore_until(["a", "b", "c", "d"], evaluate, budget=2.0, limit=1, start=0.9)[1] == ["a"]
    assert restore_until(["b", "d"], evaluate, budget=2.0, limit=1, start=0.9)[1] == ["d"]  # tries 2 x limit
    assert restore_until(["a", "b", "c"], evaluate, budget=0.99) == (pytest.approx(0.96), ["a", "b", "c"])


@pytest.mark.slow
def test_mobilenet_v2_fallback_blocks_stay_float_and_reload_identically(tmp_path):
    from skimage import data

    from slimkit import zoo

    model = zoo.load("mobilenet_v2").model.eval()
    photos = [data.chelsea(), data.coffee(), data.astronaut(), data.rocket()]
    images = torch.cat([zoo.imagenet_preprocess(p, size=96, resize=r) for r in (112, 128) for p in photos])
    smashed = _smash(model, images, min_cosine=0.999, max_fp32_layers=2)  # unreachable: up to 2 blocks go fp32
    state = smashed.applied[0]["state"]
    assert 1 <= len(state["fp32_layers"]) <= 2 and state["cosine"] > state["cosine_all_int8"] > 0.95
    assert len(state["fp32_modules"]) >= 2 * len(state["fp32_layers"])  # each block: conv (+BN) (+ReLU6)
    modules = dict(smashed.model.named_modules())
    for name in state["fp32_layers"]:  # the conv (BN folded into it) is a float Conv2d
        assert type(modules[name]) is torch.nn.Conv2d and modules[name].weight.dtype == torch.float32
    for name in state["fp32_modules"]:  # its ReLU6 too (the BN module is gone: folded into the conv)
        assert not type(modules.get(name)).__module__.startswith("torch.ao.nn.quantized")
    assert state["quantized_modules"] >= 50
    smashed.save_pretrained(tmp_path / "m")
    again = SmashedModel.from_pretrained(tmp_path / "m")
    assert torch.equal(again(images), smashed(images))
