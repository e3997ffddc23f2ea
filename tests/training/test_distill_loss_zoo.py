"""MMRazor's loss zoo, checked against the properties their papers state (not against MMRazor's code)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from slimkit.errors import ConfigError
from slimkit.razor import build
from slimkit.training.distill import (
    WSLD,
    ActivationLoss,
    AngleWiseRKD,
    ConvModuleConnector,
    CRDConnector,
    CRDLoss,
    DAFLGenerator,
    DistanceWiseRKD,
    DISTLoss,
    DKDLoss,
    FBKDLoss,
    FBKDStudentConnector,
    FBKDTeacherConnector,
    FTLoss,
    InformationEntropyLoss,
    KLDivergence,
    MGDConnector,
    MGDLoss,
    OFDLoss,
    OnehotLikeLoss,
    Paraphraser,
    PKDLoss,
    Translator,
    ZSKTGenerator,
)
from slimkit.training.distill.connectors import NonLocal2d, bn_margin

torch.manual_seed(0)
S, T, Y = torch.randn(6, 5), torch.randn(6, 5), torch.tensor([0, 1, 2, 3, 4, 0])


def test_kl_divergence_reductions_dense_logits_and_teacher_gradients():
    batchmean = KLDivergence(tau=2)(S, T)
    assert float(KLDivergence(tau=2, reduction="sum")(S, T)) == pytest.approx(float(batchmean) * 6, rel=1e-6)
    assert float(KLDivergence(tau=2, reduction="mean")(S, T)) == pytest.approx(float(batchmean) / 5, rel=1e-6)
    s, t = torch.randn(2, 5, 3, 3), torch.randn(2, 5, 3, 3)  # [N, C, H, W]: classes on dimension 1
    per_pixel = KLDivergence()(s.permute(0, 2, 3, 1).reshape(-1, 5), t.permute(0, 2, 3, 1).reshape(-1, 5))
    assert float(KLDivergence()(s, t)) == pytest.approx(float(per_pixel) * 9, rel=1e-5)  # batchmean: / N
    teacher = T.clone().requires_grad_()
    KLDivergence(teacher_detach=False, loss_weight=-2)(S, teacher).backward()
    assert teacher.grad is not None and float(teacher.grad.abs().sum()) > 0
    teacher.grad = None
    KLDivergence()(S.clone().requires_grad_(), teacher).backward()
    assert teacher.grad is None  # detached by default
    with pytest.raises(ConfigError, match="reduction must be one of"):
        KLDivergence(reduction="avg")


def test_dkd_decomposes_kd_into_target_and_non_target_terms():
    """KD = TCKD + (1 - p_t^teacher) * NCKD for each sample (Zhao et al., eq. 3)."""
    for i in range(len(S)):
        s, t, y = S[i:i + 1], T[i:i + 1], Y[i:i + 1]
        kd = KLDivergence(tau=1)(s, t)
        tckd = DKDLoss(alpha=1, beta=0)(s, t, y)
        nckd = DKDLoss(alpha=0, beta=1)(s, t, y)
        p_t = F.softmax(t, dim=1)[0, y[0]]
        assert float(kd) == pytest.approx(float(tckd + (1 - p_t) * nckd), rel=1e-5, abs=1e-7)
    assert float(DKDLoss()(T, T, Y)) == pytest.approx(0.0, abs=1e-6)
    masked = torch.tensor([0, 1, 2, -100, 4, 0])  # rows labelled -100 are left out
    assert float(DKDLoss()(S, T, masked)) == pytest.approx(float(DKDLoss()(S[[0, 1, 2, 4, 5]], T[[0, 1, 2, 4, 5]],
                                                                             Y[[0, 1, 2, 4, 5]])), rel=1e-6)


def test_dist_matches_relations_not_values():
    assert float(DISTLoss()(T, T)) == pytest.approx(0.0, abs=1e-6)
    assert float(DISTLoss()(S, T)) > 0
    # a shift of all logits leaves the softmax (and so the relations) unchanged
    assert float(DISTLoss()(T + 3.0, T)) == pytest.approx(0.0, abs=1e-6)


def test_rkd_is_invariant_to_scale_and_translation_of_the_embedding():
    x = torch.randn(5, 7)
    assert float(DistanceWiseRKD(with_l2_norm=False)(2.5 * x, x)) == pytest.approx(0.0, abs=1e-6)
    assert float(AngleWiseRKD(with_l2_norm=False)(3 * x + 1, x)) == pytest.approx(0.0, abs=1e-6)
    wide = torch.randn(5, 12)  # only the batch size must agree
    assert float(DistanceWiseRKD()(x, wide)) > 0 and float(AngleWiseRKD()(x, wide)) > 0
    x.requires_grad_()
    DistanceWiseRKD()(x, wide).backward()
    assert torch.isfinite(x.grad).all()


def test_wsld_weights_each_sample_by_the_cross_entropy_ratio():
    tau = 2.0
    soft_ce = -(F.softmax(T / tau, 1) * F.log_softmax(T / tau, 1)).sum(1)
    expected = tau**2 * ((1 - math.exp(-1)) * soft_ce).mean()  # student == teacher: ratio 1
    assert float(WSLD(tau=tau)(T, T, Y)) == pytest.approx(float(expected), rel=1e-5)
    with pytest.raises(ConfigError, match="num_classes=1000.*5 classes"):
        WSLD(num_classes=1000)(S, T, Y)


def test_ofd_skips_positions_below_a_negative_teacher():
    t = torch.tensor([[[[-1.0]], [[2.0]]]])
    s = torch.tensor([[[[-3.0]], [[1.0]]]])  # channel 0: student below a negative teacher -> not counted
    assert float(OFDLoss(mul_factor=1)(s, t)) == pytest.approx(1.0)


def test_bn_margin_is_the_expected_negative_response():
    bn = torch.nn.BatchNorm2d(2)
    bn.weight.data, bn.bias.data = torch.tensor([1.0, 0.5]), torch.tensor([0.5, -1.0])
    margin = bn_margin(bn).flatten()
    g = torch.Generator().manual_seed(0)
    for c in range(2):
        x = torch.randn(400_000, generator=g) * bn.weight[c].item() + bn.bias[c].item()
        assert float(margin[c]) == pytest.approx(float(x[x < 0].mean()), abs=0.01)


def test_pkd_ignores_a_per_channel_affine_change():
    s = torch.randn(2, 3, 4, 4)
    assert float(PKDLoss()(s * torch.tensor([2.0, 0.5, 3.0]).view(1, 3, 1, 1) + 1.0, s)) == pytest.approx(0, abs=1e-5)
    assert float(PKDLoss()((s, s), (s, torch.randn(2, 3, 8, 8)))) > 0  # levels summed, sizes resized


def test_mgd_masks_the_share_lambda_of_positions():
    connector = MGDConnector(4, 4, lambda_mgd=0.65)
    seen = []
    connector.generation.register_forward_pre_hook(lambda m, a: seen.append(a[0]))
    connector(torch.ones(8, 4, 16, 16))
    assert float((seen[0] == 0).float().mean()) == pytest.approx(0.65, abs=0.05)
    assert float(MGDLoss(alpha_mgd=1.0)(torch.ones(2, 1, 1, 1), torch.zeros(2, 1, 1, 1))) == pytest.approx(1.0)


def test_crd_memory_bank_and_indices():
    loss = CRDLoss(neg_num=8, sample_n=20, dim_out=4)
    s = F.normalize(torch.randn(3, 4), dim=1).requires_grad_()
    t = F.normalize(torch.randn(3, 4), dim=1)
    value = loss(s, t, {"labels": torch.tensor([0, 1, 2]), "sample_idx": torch.tensor([5, 6, 7])})
    value.backward()
    assert torch.isfinite(value) and s.grad is not None
    assert torch.allclose(loss.memory_s[5].norm(), torch.tensor(1.0))  # moved toward s[0] and renormalised
    with pytest.raises(ConfigError, match="CRDLoss needs each sample's index"):
        loss(s, t, torch.tensor([0, 1, 2]))
    assert CRDConnector(6, 4)(torch.randn(2, 6, 1, 1)).norm(dim=1).allclose(torch.ones(2))


def test_factor_transfer_connectors_and_loss():
    feature = torch.randn(2, 8, 4, 4)
    para = Paraphraser(8, 4)
    assert para(feature).shape == feature.shape  # pretrain: the reconstruction
    para.phase = "train"
    factor = para(feature)
    assert factor.shape == (2, 4, 4, 4) and not factor.requires_grad
    assert float(FTLoss()(factor, factor)) == pytest.approx(0.0)
    assert Translator(6, 4)(torch.randn(2, 6, 4, 4)).shape == (2, 4, 4, 4)


def test_fbkd_connectors_feed_the_loss_and_nonlocal_starts_as_identity():
    x = torch.randn(2, 8, 6, 6)
    assert torch.equal(NonLocal2d(8)(x), x)  # zeros_init: the block starts as the identity
    s_out = FBKDStudentConnector(8, reduction=2, sub_sample=True, maxpool_stride=2)(x)
    t_out = FBKDTeacherConnector(8, reduction=2, sub_sample=True, maxpool_stride=2)(x.flip(0))
    assert len(s_out) == 6 and len(t_out) == 5
    assert float(s_out[0].sum(dim=(1, 2, 3))[0]) == pytest.approx(36.0, rel=1e-5)  # spatial mask sums to H*W
    loss = FBKDLoss()(s_out, t_out).detach()
    assert torch.isfinite(loss) and float(loss) > 0
    with pytest.raises(ConfigError, match="FBKDLoss takes the 5 outputs of the FBKDTeacherConnector"):
        FBKDLoss()(s_out, x)


def test_dafl_objectives():
    confident = torch.tensor([[20.0, 0.0, 0.0], [0.0, 20.0, 0.0]])
    assert float(OnehotLikeLoss()(confident)) < 1e-6
    uniform = torch.zeros(4, 10)
    assert float(InformationEntropyLoss()(uniform)) == pytest.approx(-1.0)  # sum p log10 p = -log10(10)
    assert float(ActivationLoss()(torch.full((2, 3), -2.0))) == pytest.approx(-2.0)


def test_generators_make_images():
    assert ZSKTGenerator(32, 16, 8)(batch_size=3).shape == (3, 3, 32, 32)
    assert DAFLGenerator(8, 16, 8, out_channels=1)(torch.randn(2, 16)).shape == (2, 1, 8, 8)
    with pytest.raises(ConfigError, match=r"latents of shape \[N, 16\]"):
        ZSKTGenerator(32, 16, 8)(torch.randn(2, 4))


def test_convmodule_connector_reads_layer_configs():
    default = ConvModuleConnector(4, 8)
    assert [type(m).__name__ for m in default.conv_module] == ["Conv2d", "ReLU"]  # MMRazor's default act
    bn = build(dict(type="ConvModuleConnector", in_channel=4, out_channel=8, norm_cfg=dict(type="BN"), act_cfg=None))
    assert [type(m).__name__ for m in bn.conv_module] == ["Conv2d", "BatchNorm2d"] and bn.conv_module[0].bias is None
    with pytest.raises(ConfigError, match="norm_cfg type 'BatchNorm' is not supported.*Types: BN"):
        ConvModuleConnector(4, 8, norm_cfg=dict(type="BatchNorm"))
    with pytest.raises(ConfigError, match=r"needs \[N, 4, H, W\]"):
        default(torch.randn(1, 3, 2, 2))
