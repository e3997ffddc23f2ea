"""DARTS on the tiny MobileNetV2 space (differentiable choices, first- and second-order alpha updates, the argmax
export) and MMArchitectureQuant's PTQ / LSQ configs on the CPU int8 engine (and the refused backends)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from slimkit.engines.nas import DiffMutableOP
from slimkit.errors import ConfigError
from slimkit.evaluation import count_parameters
from slimkit.razor import Darts, MMArchitectureQuant, batch_loss, build, load_config
from slimkit.training import fit
from tests.faces.mmrazor.mm_models import ImageClassifier, images

CONFIGS = Path(__file__).parent / "configs"


def darts_net(seed: int = 0) -> ImageClassifier:
    cfg = load_config(CONFIGS / "nas" / "darts_mobilenet_supernet.py")
    torch.manual_seed(seed)
    return ImageClassifier(build(cfg.nas_backbone), 96)


def test_darts_steps_alpha_by_the_held_out_gradient_and_trains_the_weights_on_the_rest():
    torch.manual_seed(0)
    net = torch.nn.Sequential(DiffMutableOP({"lin": torch.nn.Linear(4, 4), "skip": torch.nn.Identity()}),
                              torch.nn.Linear(4, 3))
    algo = Darts(net, arch_optimizer=dict(type="SGD", lr=1.0))
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
    alpha = algo.arch_parameters()[0]
    before = alpha.detach().clone()
    (grad,) = torch.autograd.grad(F.cross_entropy(net(x[:3]), y[:3]), [alpha])
    weights = net[1].weight.detach().clone()
    fit(algo, [(x, y)], loss=batch_loss, steps=1, lr=0.1, optimizer="sgd", seed=0, progress=False, num_threads=1)
    assert torch.allclose(algo.arch_parameters()[0], before - grad, atol=1e-6)
    assert not torch.equal(net[1].weight, weights)  # the weights trained on the second half
    assert algo.search_subnet() == {"0": {"chosen": net[0].argmax_choice()}}


@pytest.mark.slow
def test_darts_config_mixes_candidates_and_steps_alpha_on_held_out_data_first_order():
    cfg = load_config(CONFIGS / "nas" / "darts_mobilenet_supernet.py")
    assert cfg.model.unroll is True and cfg.optim_wrapper.mutator.optimizer.type == "Adam"
    net = darts_net()
    algo = build(cfg.model, architecture=net, unroll=False, arch_optimizer=dict(type="SGD", lr=1.0))
    assert isinstance(algo, Darts) and sorted(algo.diff_ops) == ["backbone.layer2.0", "backbone.layer2.1",
                                                                  "backbone.layer3.0", "backbone.layer3.1"]
    assert not any(n.endswith("arch_param") for n, _ in algo.named_parameters())  # the weights' optimizer skips it
    assert "architecture.backbone.layer2.1.arch_param" in algo.state_dict()  # but it is saved
    op = algo.diff_ops["backbone.layer2.1"]
    x = torch.rand(2, 24, 8, 8)
    mixed = sum(w * op.candidates[c](x) for w, c in zip(op.weights().detach(), op.choices, strict=True))
    with torch.no_grad():
        assert torch.allclose(op(x), mixed, atol=1e-6)
    x, y = images(1, size=16, batch=4)[0]
    alphas = [a.detach().clone() for a in algo.arch_parameters()]
    algo.train()
    held_loss = F.cross_entropy(net(x[:2]), y[:2])  # the first half is the held-out half
    grads = torch.autograd.grad(held_loss, algo.arch_parameters())
    losses = algo(x, y, mode="loss")
    assert set(losses) == {"loss"}
    for before, grad, after in zip(alphas, grads, algo.arch_parameters(), strict=True):
        assert torch.allclose(after, before - grad, atol=1e-6)  # SGD lr=1: alpha - dL_val/dalpha
    assert algo.last_arch_loss == pytest.approx(float(held_loss.detach()), rel=1e-5)
    assert all(a.grad is None or a.grad.abs().sum() > 0 for a in algo.arch_parameters())


@pytest.mark.slow
def test_darts_second_order_step_differs_from_first_order_and_exports_the_argmax_architecture():
    batches = images(2, size=16, batch=4)
    first = build(load_config(CONFIGS / "nas" / "darts_mobilenet_supernet.py").model, architecture=darts_net(),
                  unroll=False, arch_optimizer=dict(type="SGD", lr=1.0))
    second = build(load_config(CONFIGS / "nas" / "darts_mobilenet_supernet.py").model, architecture=darts_net(),
                   arch_optimizer=dict(type="SGD", lr=1.0), arch_batches=batches[1:])
    assert second.unroll
    start = [a.detach().clone() for a in second.arch_parameters()]
    weights = [p.detach().clone() for p in second.architecture.parameters()]
    for algo in (first, second):
        fit(algo, batches[:1], loss=batch_loss, steps=1, lr=0.025, optimizer="sgd", seed=0, progress=False,
            num_threads=1)
    moved = [float((a.detach() - b).abs().sum()) for a, b in zip(second.arch_parameters(), start, strict=True)]
    assert all(m > 0 for m in moved)
    assert any(not torch.allclose(a, b) for a, b in zip(first.arch_parameters(), second.arch_parameters(),
                                                         strict=True))
    assert any(not torch.equal(p, w) for p, w in zip(second.architecture.parameters(), weights, strict=True))
    with torch.no_grad():  # make the argmax unambiguous: layer2.1 prefers the skip, layer3.0 k5_e6
        second.diff_ops["backbone.layer2.1"].arch_param.copy_(torch.tensor([0.0] * 6 + [5.0]))
        second.diff_ops["backbone.layer3.0"].arch_param.copy_(torch.tensor([0, 0, 0, 0, 5.0, 0, 0]))
    subnet = second.search_subnet()
    assert subnet["backbone.layer2.1"] == {"chosen": "skip"} and subnet["backbone.layer3.0"] == {"chosen": "k5_e6"}
    exported = second.export()
    assert not any(isinstance(m, DiffMutableOP) for m in exported.modules())
    assert type(exported.backbone.layer2[1]).__name__ == "SearchableIdentity"
    assert exported.backbone.layer3[0].depthwise_conv[0].kernel_size == (5, 5)
    assert count_parameters(exported) < count_parameters(second.architecture) / 3
    for op in second.diff_ops.values():
        op.fix_argmax()
    second.eval()
    exported.eval()
    x = batches[0][0]
    with torch.no_grad():
        assert torch.allclose(exported(x), second.architecture(x), atol=1e-5)


def test_darts_refuses_a_space_without_differentiable_choices_and_bad_optimizers():
    spos_space = load_config(CONFIGS / "nas" / "spos_mobilenet_supernet_tiny.py")
    net = ImageClassifier(build(spos_space.nas_backbone), 96)
    with pytest.raises(ConfigError, match="Darts needs an architecture with DiffMutableOP"):
        Darts(net)
    def tiny() -> torch.nn.Sequential:
        return torch.nn.Sequential(DiffMutableOP({"lin": torch.nn.Linear(4, 4), "skip": torch.nn.Identity()}),
                                   torch.nn.Linear(4, 3))

    algo = Darts(tiny(), arch_optimizer=dict(type="Adamm", lr=1e-3))
    with pytest.raises(ConfigError, match="'Adamm' is not a torch.optim optimizer"):
        algo(torch.randn(4, 4), torch.tensor([0, 1, 2, 0]), mode="loss")
    with pytest.raises(ConfigError, match="at least 2 samples"):
        Darts(tiny())(torch.randn(1, 4), torch.tensor([0]), mode="loss")
    with pytest.raises(ConfigError, match="arch_optimizer must be dict"):
        Darts(tiny(), arch_optimizer="Adam")


def digit_batches(n: int = 2, batch: int = 32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.rand(batch, 1, 8, 8, generator=g), torch.randint(10, (batch,), generator=g)) for _ in range(n)]


@pytest.mark.slow
def test_ptq_native_config_converts_the_architecture_to_int8():
    cfg = load_config(CONFIGS / "quantization" / "ptq_native_digits.py")
    torch.manual_seed(0)
    algo = build(cfg.model)
    assert isinstance(algo, MMArchitectureQuant) and (algo.backend, algo.qat_mode) == ("native", "ptq")
    batches = digit_batches()
    x = batches[0][0]
    with torch.no_grad():
        reference = algo(x, mode="tensor")
    int8 = algo.calibrate(batches)
    assert algo.quantized and algo.record["quantized_modules"] == 5 and algo.record["fp32_layers"] == []
    kinds = {type(m).__module__ for m in int8.modules()}
    assert any(k.startswith("torch.ao.nn.quantized") for k in kinds)
    with torch.no_grad():
        out = algo(x, mode="tensor")
    assert F.cosine_similarity(out.flatten(), reference.flatten(), dim=0) > 0.99
    assert (algo(x, mode="predict") == reference.argmax(1)).float().mean() > 0.9
    with pytest.raises(ConfigError, match="already converted to int8"):
        algo(*batches[0], mode="loss")


@pytest.mark.slow
def test_lsq_config_trains_learned_steps_then_converts_to_int8():
    cfg = load_config(CONFIGS / "quantization" / "lsq_academic_digits.py")
    torch.manual_seed(0)
    algo = build(cfg.model)
    assert (algo.backend, algo.qat_mode) == ("academic", "lsq")
    steps = {n: p.detach().clone() for n, p in algo.named_parameters() if n.endswith("_scale")}
    assert len(steps) == 10  # weight and input steps of 3 convs and 2 linears
    batches = digit_batches()
    fit(algo, batches, loss=batch_loss, steps=2, lr=1e-3, seed=0, progress=False, num_threads=1)
    moved = {n for n, p in algo.named_parameters() if n in steps and not torch.equal(p.detach(), steps[n])}
    assert moved == set(steps)
    algo.calibrate(batches)
    assert algo.quantized and algo.record["quantized_modules"] == 5


def test_tensorrt_openvino_and_non_8_bit_quantizers_are_refused_naming_the_cpu_path():
    cfg = load_config(CONFIGS / "quantization" / "ptq_tensorrt_digits.py")
    with pytest.raises(ConfigError, match="'TensorRTQuantizer' targets a TensorRT deployment.*NativeQuantizer"):
        build(cfg.model)
    good = load_config(CONFIGS / "quantization" / "ptq_native_digits.py").model
    qconfig = good.quantizer.global_qconfig
    with pytest.raises(ConfigError, match="'OpenVINOQuantizer' targets a OpenVINO deployment"):
        build(good, quantizer=dict(type="mmrazor.OpenVINOQuantizer", global_qconfig=qconfig),
              deploy_cfg=dict(backend_config=dict(type="openvino")))  # MMRazor's PTQ configs carry MMDeploy's
    four = dict(qconfig, w_qscheme=dict(qdtype="qint8", bit=4))
    with pytest.raises(ConfigError, match="w_qscheme bit=4"):
        build(good, quantizer=dict(type="NativeQuantizer", global_qconfig=four))
    mixed = dict(qconfig, w_fake_quant=dict(type="LearnableFakeQuantize"))
    with pytest.raises(ConfigError, match="mixes fake quantizers"):
        build(good, quantizer=dict(type="NativeQuantizer", global_qconfig=mixed))
    with pytest.raises(ConfigError, match="quantizer type 'SNPEQuantizer' is not supported"):
        build(good, quantizer=dict(type="SNPEQuantizer", global_qconfig=qconfig))
    with pytest.raises(ConfigError, match="unknown key\\(s\\) \\['w_qschem'\\]"):
        build(good, quantizer=dict(type="NativeQuantizer", global_qconfig=dict(w_qschem={})))
