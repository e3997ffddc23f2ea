"""MMRazor's remaining distillation parts: ABLoss, KDSoftCELoss, CrossEntropyLoss, the one-op connectors, the input
and parameter recorders, SelfDistill (BYOT), and ``head.loss_module`` recorded in loss mode.

Loss values are recomputed here from the papers' formulas; the BYOT config (``configs/distill/cls``) builds around
a small MMCls-shaped ResNet and trains.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tests.faces.mmrazor.recorded_calls as calls
from slimkit.errors import ConfigError
from slimkit.razor import SelfDistill, SingleTeacherDistill, build, load_config
from slimkit.training.distill import (
    ABLoss,
    BYOTConnector,
    ConfigurableDistiller,
    CrossEntropyLoss,
    KDSoftCELoss,
    KLDivergence,
    RecorderManager,
)
from tests.faces.mmrazor.mm_models import images, resnet, trains

CLS = Path(__file__).parent / "configs" / "distill" / "cls"


def test_ab_loss_is_the_squared_hinge_on_the_teachers_activation_boundary():
    s = torch.tensor([[0.5, -2.0, 1.5, -0.5]])
    t = torch.tensor([[-1.0, -1.0, 2.0, 3.0]])
    # t <= 0 and s > -1: (s + 1)^2 -> 2.25 (first), the second is already below -1 -> 0
    # t > 0 and s <= 1: (s - 1)^2 -> the third is above 1 -> 0, the fourth (−0.5 − 1)^2 = 2.25
    expected = (2.25 + 2.25) / 1 * 3 / 1000
    assert float(ABLoss()(s, t)) == pytest.approx(expected)
    assert float(ABLoss(loss_weight=2.0, margin=2.0)(s, t)) == pytest.approx(
        2 * ((0.5 + 2) ** 2 + (1.5 - 2) ** 2 + (-0.5 - 2) ** 2) * 3 / 1000)  # s = -2 sits on -margin: no term
    with pytest.raises(ConfigError, match="margin must be a number > 0"):
        ABLoss(margin=0)
    with pytest.raises(ConfigError, match="same shape"):
        ABLoss()(s, t[:, :2])


def test_kd_soft_ce_is_the_soft_target_cross_entropy_times_tau_squared():
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g)
    soft = F.softmax(t / 2, dim=1)
    per_sample = -(soft * F.log_softmax(s / 2, dim=1)).sum(1)
    assert float(KDSoftCELoss(tau=2)(s, t)) == pytest.approx(float(per_sample.mean() * 4), rel=1e-6)
    assert float(KDSoftCELoss(tau=2, mult_tem_square=False, reduction="sum")(s, t)) == pytest.approx(
        float(per_sample.sum()), rel=1e-6)
    weighted = KDSoftCELoss(tau=2, reduction="none")(s, t, weight=torch.tensor([1.0, 0.0, 2.0, 0.0]))
    assert torch.allclose(weighted, per_sample * torch.tensor([1.0, 0.0, 2.0, 0.0]) * 4)
    # it differs from KL by the teacher's entropy only: the gradients on the student agree
    kl = KLDivergence(tau=2, reduction="batchmean")
    s1, s2 = s.clone().requires_grad_(), s.clone().requires_grad_()
    KDSoftCELoss(tau=2)(s1, t).backward()
    kl(s2, t).backward()
    assert torch.allclose(s1.grad, s2.grad, atol=1e-7)
    with pytest.raises(ConfigError, match="reduction must be"):
        KDSoftCELoss(reduction="avg")


def test_cross_entropy_loss_takes_the_teachers_argmax_or_the_labels():
    s = torch.tensor([[2.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
    t = torch.tensor([[0.0, 5.0, 0.0], [0.0, 0.0, 3.0]])
    expected = F.cross_entropy(s, torch.tensor([1, 2]))
    assert float(CrossEntropyLoss(loss_weight=0.5)(s, t)) == pytest.approx(0.5 * float(expected))
    mmcls = build(dict(type="mmcls.CrossEntropyLoss", loss_weight=0.7))  # the BYOT configs' spelling
    assert isinstance(mmcls, CrossEntropyLoss)
    assert float(mmcls(cls_score=s, label=torch.tensor([1, 2]))) == pytest.approx(0.7 * float(expected))
    with pytest.raises(ConfigError, match="labels of shape \\(3,\\) for logits of shape \\(2, 3\\)"):
        mmcls(cls_score=s, label=torch.tensor([1, 2, 0]))


def test_one_op_connectors_compute_the_torch_op_they_name():
    x = torch.randn(2, 4, 8, 8)
    pool = build(dict(type="TorchFunctionalConnector", function_name="avg_pool2d", func_args=dict(kernel_size=4)))
    assert torch.equal(pool(x), F.avg_pool2d(x, 4))
    layer = build(dict(type="TorchNNConnector", module_name="AdaptiveMaxPool2d", module_args=dict(output_size=1)))
    assert torch.equal(layer(x), x.amax(dim=(2, 3), keepdim=True))
    conv = build(dict(type="TorchNNConnector", module_name="Conv2d", module_args=dict(in_channels=4, out_channels=6,
                                                                                        kernel_size=1)))
    assert conv(x).shape == (2, 6, 8, 8) and sum(p.numel() for p in conv.parameters()) == 6 * 4 + 6
    norm = build(dict(type="NormConnector", in_channels=4, norm_cfg=dict(type="BN")))
    out = norm.train()(x)
    assert out.mean(dim=(0, 2, 3)).abs().max() < 1e-5 and (out.var(dim=(0, 2, 3)) - 1).abs().max() < 0.05
    with pytest.raises(ConfigError, match="function_name='avg_pool' is not supported.*avg_pool2d"):
        build(dict(type="TorchFunctionalConnector", function_name="avg_pool"))
    with pytest.raises(ConfigError, match="func_args=.*kernel"):
        build(dict(type="TorchFunctionalConnector", function_name="avg_pool2d", func_args=dict(kernal_size=2)))
    with pytest.raises(ConfigError, match="module_name='LSTM' is not supported"):
        build(dict(type="TorchNNConnector", module_name="LSTM"))


def test_input_recorders_keep_the_arguments_in_parameter_order_and_the_parameter_recorder_the_tensor():
    manager = RecorderManager({
        "method": dict(type="MethodInputs", source="tests.faces.mmrazor.recorded_calls.Toy.combine"),
        "function": dict(type="FunctionInputs", source="tests.faces.mmrazor.recorded_calls.scale"),
        "weight": dict(type="Parameter", source="fc.weight")})
    model = nn.Sequential()
    model.add_module("fc", nn.Linear(2, 3))
    manager.initialize(model)
    toy = calls.Toy()
    with manager:
        toy.combine(1, y=2)
        toy.combine(y=5, x=4)
        calls.run_scale(torch.ones(2), 3.0)
    assert manager.get("method", 0) == [1, 2] and manager.get("method", 1, data_idx=0) == 4
    assert manager.get("method", 1, data_idx=1) == 5
    assert manager.get("function", 0, data_idx=1) == 3.0
    assert manager.get("weight") is model.fc.weight
    assert calls.Toy.combine is calls.Toy.__dict__["combine"] and calls.scale.__name__ == "scale"  # unpatched
    with pytest.raises(ConfigError, match="no parameter 'fc.wieght'.*fc.weight"):
        RecorderManager({"w": dict(type="Parameter", source="fc.wieght")}).initialize(model)


class HeadWithLossModule(nn.Module):
    """An MMCls head: ``fc`` in every forward; ``loss_module`` only in ``loss`` (training)."""

    def __init__(self, width: int, classes: int = 10) -> None:
        super().__init__()
        self.fc, self.loss_module = nn.Linear(width, classes), nn.CrossEntropyLoss()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class Classifier(nn.Module):
    """backbone/neck of ``mm_models.resnet`` and a head whose loss module exists but runs only in ``loss``."""

    def __init__(self, seed: int, cifar: bool = False) -> None:
        super().__init__()
        base = resnet(18, seed=seed, cifar=cifar)
        self.backbone, self.neck, self.head = base.backbone, base.neck, HeadWithLossModule(128)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.neck(self.backbone(x)))


class LossClassifier(Classifier):
    def loss(self, inputs: torch.Tensor, data_samples: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": self.head.loss_module(self(inputs), data_samples)}


@pytest.mark.parametrize("cls", [Classifier, LossClassifier], ids=["forward-only", "loss-method"])
def test_dkd_config_records_the_labels_of_a_head_loss_module_that_runs_only_in_loss_mode(cls):
    cfg = load_config(CLS / "dkd_logits_with_labels.py")
    algo = build(cfg.model, architecture=cls(0), teacher=resnet(34, seed=1))
    x, y = images(1)[0]
    losses = {k: v.detach() for k, v in algo(x, y, mode="loss").items()}
    recorder = algo.distiller.student_recorders.recorders["labels"]
    assert recorder.virtual == "loss_hooked"  # the model has the module: hooked, fed only when it did not run
    scores, labels = recorder.data[0]
    assert torch.equal(labels, y) and len(recorder.data) == 1
    if cls is LossClassifier:
        assert float(losses["student.loss"]) == pytest.approx(float(F.cross_entropy(scores.detach(), y)), rel=1e-5)
    assert torch.isfinite(losses["distill.loss_decoupled"])


@pytest.mark.slow
def test_byot_config_trains_shallow_classifiers_taught_by_the_deepest_one(monkeypatch):
    cfg = load_config(CLS / "byot_resnet_self.py")
    assert cfg.model.distiller.connectors.loss_s3_sfeat.in_channel == 64
    net = LossClassifier(0, cifar=True)  # stride-1 stem: stages at 16, 8, 4, 2 pixels
    algo = build(cfg.model, architecture=net)
    assert isinstance(algo, SelfDistill) and isinstance(algo.distiller, ConfigurableDistiller)
    assert type(algo.distiller).__name__ == "BYOTDistiller"
    data = images(1, size=16)
    keys = {"student.loss", *(f"distill.loss_{k}_{i}" for k in ("fet", "label", "softl") for i in (1, 2, 3))}
    calls_made = []
    connector = algo.distiller.connectors["loss_s1_sfeat"]
    monkeypatch.setattr(connector, "forward", lambda f, _fwd=connector.forward: calls_made.append(1) or _fwd(f))
    losses = trains(algo, data, keys, steps=3, lr=3e-3)
    # 6 forwards (trains: the first loss dict, two loss measurements, 3 steps): the connector ran once per forward
    # although three losses read it (connector_idx picks from its one (feature, logits) output)
    assert len(calls_made) == 6 and set(losses) == keys
    # loss_label_i: cross-entropy of the shallow classifier's logits on the batch's labels
    algo.eval()
    x, y = data[0]
    with torch.no_grad():
        feats = {}
        hook = net.backbone.layer2[1].relu.register_forward_hook(lambda m, i, o: feats.setdefault("s2", o))
        net(x)
        hook.remove()
        _, logits = algo.distiller.connectors["loss_s2_sfeat"](feats["s2"])
        got = float(algo(x, y, mode="loss")["distill.loss_label_2"])
    assert got == pytest.approx(0.7 * float(F.cross_entropy(logits, y)), rel=1e-4)


def test_byot_connector_and_self_distill_refuse_bad_settings():
    with pytest.raises(ConfigError, match="power of two"):
        BYOTConnector(in_channel=16, out_channel=96, num_classes=10)
    connector = BYOTConnector(in_channel=8, out_channel=16, num_classes=10, expansion=1, pool_size=4, stride=2)
    assert [t.shape for t in connector.eval()(torch.rand(2, 8, 8, 8))] == [(2, 16), (2, 10)]
    with pytest.raises(ConfigError, match="pooled feature has 64 values"):
        connector(torch.rand(2, 8, 16, 16))
    with pytest.raises(ConfigError, match="SelfDistill needs distiller="):
        SelfDistill(resnet(18))
    bad = dict(student_recorders=dict(s=dict(type="ModuleOutputs", source="head.fc")),
               teacher_recorders=dict(t=dict(type="ModuleOutputs", source="head.fc")),
               distill_losses=dict(kl=dict(type="KLDivergence")),
               loss_forward_mappings=dict(kl=dict(preds_S=dict(recorder="s", from_student=True, connector_idx=5),
                                                  preds_T=dict(recorder="t", from_student=False))))
    algo = SelfDistill(resnet(18), distiller=bad)
    with pytest.raises(ConfigError, match="connector_idx=5: the output of connector None is a Tensor"):
        algo(*images(1, size=16)[0], mode="loss")


def test_a_single_teacher_config_maps_kd_soft_ce_and_ab_losses():
    distiller = dict(
        student_recorders=dict(fc=dict(type="ModuleOutputs", source="head.fc"),
                               feat=dict(type="ModuleOutputs", source="neck.gap")),
        teacher_recorders=dict(fc=dict(type="ModuleOutputs", source="head.fc"),
                               feat=dict(type="ModuleOutputs", source="neck.gap")),
        distill_losses=dict(loss_ce=dict(type="KDSoftCELoss", tau=4), loss_ab=dict(type="ABLoss", margin=0.5)),
        loss_forward_mappings=dict(
            loss_ce=dict(preds_S=dict(recorder="fc", from_student=True), preds_T=dict(recorder="fc",
                                                                                     from_student=False)),
            loss_ab=dict(s_feature=dict(recorder="feat", from_student=True),
                         t_feature=dict(recorder="feat", from_student=False))))
    algo = SingleTeacherDistill(resnet(18), teacher=resnet(18, seed=1), distiller=distiller)
    losses = algo(*images(1)[0], mode="loss")
    assert set(losses) == {"student.loss", "distill.loss_ce", "distill.loss_ab"}
    assert all(math.isfinite(float(v.detach())) for v in losses.values())
