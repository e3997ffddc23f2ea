"""Distillation losses against hand computations; connectors; the shape / mapping errors of the distiller."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from slimkit.errors import ConfigError
from slimkit.training.distill import (
    ATLoss,
    ChannelWiseDivergence,
    ConfigurableDistiller,
    Conv1x1Connector,
    CosineSimilarityLoss,
    KLDivergence,
    L2Loss,
    LinearConnector,
    MSELoss,
    connector_for,
)


def test_kl_divergence_matches_the_formula_and_scales_with_tau_squared():
    torch.manual_seed(0)
    s, t = torch.randn(8, 5), torch.randn(8, 5)
    for tau in (1.0, 4.0):
        p_t = F.softmax(t / tau, dim=1)
        expected = (p_t * (p_t.log() - F.log_softmax(s / tau, dim=1))).sum(1).mean() * tau**2
        torch.testing.assert_close(KLDivergence(tau=tau)(s, t), expected)
    assert float(KLDivergence(tau=3.0)(t, t)) == pytest.approx(0.0, abs=1e-6)
    # token logits [N, L, V] are rows too; loss_weight multiplies
    torch.testing.assert_close(KLDivergence(loss_weight=2.0)(s.view(2, 4, 5), t.view(2, 4, 5)),
                               2 * KLDivergence()(s, t))


def test_feature_losses():
    s, t = torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[1.0, 0.0], [3.0, 2.0]])
    assert float(MSELoss()(s, t)) == pytest.approx(2.0)  # (0 + 4 + 0 + 4) / 4
    assert float(L2Loss(normalize=False)(s, t)) == pytest.approx(4.0)  # per-sample sums 4 and 4
    assert float(CosineSimilarityLoss()(s, s)) == pytest.approx(0.0, abs=1e-6)
    assert float(CosineSimilarityLoss()(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]]))) == pytest.approx(1.0)


def test_channel_wise_divergence_is_a_spatial_kl_per_channel():
    torch.manual_seed(1)
    s, t = torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4)
    tau = 2.0
    p_t = F.softmax(t.reshape(6, 16) / tau, dim=1)
    expected = (p_t * (p_t.log() - F.log_softmax(s.reshape(6, 16) / tau, dim=1))).sum() * tau**2 / 6
    torch.testing.assert_close(ChannelWiseDivergence(tau=tau)(s, t), expected)
    assert float(ChannelWiseDivergence()(t, t)) == pytest.approx(0.0, abs=1e-6)


def test_attention_transfer_compares_maps_of_different_widths():
    torch.manual_seed(2)
    t = torch.randn(2, 16, 4, 4)
    s = torch.cat([t, t], dim=1)  # twice the channels, the same attention map
    assert float(ATLoss()(s, t)) == pytest.approx(0.0, abs=1e-7)
    assert float(ATLoss()(torch.randn(2, 8, 4, 4), t)) > 0
    with pytest.raises(ConfigError, match="spatial"):
        ATLoss()(torch.randn(2, 8, 2, 2), t)


def test_connectors_map_widths():
    assert Conv1x1Connector(8, 16)(torch.randn(2, 8, 3, 3)).shape == (2, 16, 3, 3)
    assert LinearConnector(8, 16)(torch.randn(2, 5, 8)).shape == (2, 5, 16)
    assert isinstance(connector_for((2, 8, 3, 3), (2, 16, 3, 3)), Conv1x1Connector)
    assert isinstance(connector_for((2, 5, 8), (2, 5, 16)), LinearConnector)
    with pytest.raises(ConfigError, match="No connector"):
        connector_for((2, 8), (3, 16))


def _nets():
    torch.manual_seed(0)
    student = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    teacher = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    return student, teacher


def _hidden(connector=None):
    spec = dict(from_student=True, recorder="h")
    if connector:
        spec["connector"] = connector
    return dict(student_recorders=dict(h=dict(type="ModuleOutputs", source="1")),
                teacher_recorders=dict(h=dict(type="ModuleOutputs", source="1")),
                distill_losses=dict(feat=dict(type="MSELoss")),
                loss_forward_mappings=dict(feat=dict(s_feature=spec,
                                                     t_feature=dict(from_student=False, recorder="h"))))


def _record(distiller, student, teacher, x):
    distiller.prepare(student, teacher)
    with distiller.teacher_recording():
        teacher(x)
    with distiller.student_recording():
        student(x)
    return distiller.compute_distill_losses()


def test_shapes_that_need_a_connector_name_both_layers():
    student, teacher = _nets()
    with pytest.raises(ConfigError, match=r"student layer '1'.*\(5, 8\).*teacher layer '1'.*\(5, 16\).*"
                                          r"LinearConnector"):
        _record(ConfigurableDistiller(**_hidden()), student, teacher, torch.randn(5, 4))
    cfg = _hidden("up")
    cfg["connectors"] = dict(up=dict(type="LinearConnector", in_features=8, out_features=16))
    losses = _record(ConfigurableDistiller(**cfg), student, teacher, torch.randn(5, 4))
    assert set(losses) == {"feat"} and math.isfinite(float(losses["feat"].detach()))


def test_mapping_errors_say_what_is_expected():
    cfg = _hidden()
    cfg["loss_forward_mappings"] = dict(feat=dict(preds_S=dict(from_student=True, recorder="h"),
                                                  preds_T=dict(from_student=False, recorder="h")))
    with pytest.raises(ConfigError, match=r"MSELoss: expected keys \['s_feature', 't_feature'\]"):
        ConfigurableDistiller(**cfg)
    cfg = _hidden()
    cfg["loss_forward_mappings"]["feat"]["s_feature"]["recorder"] = "hh"
    with pytest.raises(ConfigError, match="student recorder 'hh', which does not exist.*'h'"):
        ConfigurableDistiller(**cfg)
    cfg = _hidden()
    cfg["loss_forward_mappings"]["fet"] = cfg["loss_forward_mappings"]["feat"]
    with pytest.raises(ConfigError, match="names loss 'fet'.*Did you mean 'feat'"):
        ConfigurableDistiller(**cfg)
