"""BaseAlgorithm's modes and SingleTeacherDistill: prefixed losses, a frozen eval-mode teacher, clear errors."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from slimkit.errors import ConfigError
from slimkit.razor import BaseAlgorithm, SingleTeacherDistill, batch_loss, build
from slimkit.training import fit
from slimkit.zoo.digits_cnn import digits_split


def _cnn(width: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(4 * width, 10))


def _distiller(connector: bool = True) -> dict:
    feature = dict(from_student=True, recorder="feat")
    if connector:
        feature["connector"] = "up"
    return dict(
        student_recorders=dict(feat=dict(type="ModuleOutputs", source="2"), fc=dict(type="ModuleOutputs", source="5")),
        teacher_recorders=dict(feat=dict(type="ModuleOutputs", source="2"), fc=dict(type="ModuleOutputs", source="5")),
        distill_losses=dict(loss_kl=dict(type="KLDivergence", tau=4), loss_cwd=dict(type="ChannelWiseDivergence"),
                            loss_at=dict(type="ATLoss")),
        connectors=dict(up=dict(type="Conv1x1Connector", in_channel=4, out_channel=8)) if connector else None,
        loss_forward_mappings=dict(
            loss_kl=dict(preds_S=dict(from_student=True, recorder="fc"),
                         preds_T=dict(from_student=False, recorder="fc")),
            loss_cwd=dict(preds_S=feature, preds_T=dict(from_student=False, recorder="feat")),
            loss_at=dict(s_feature=dict(from_student=True, recorder="feat"),
                         t_feature=dict(from_student=False, recorder="feat"))))


def test_base_algorithm_modes():
    torch.manual_seed(0)
    algo = BaseAlgorithm(_cnn(4))
    x, y = torch.randn(6, 1, 8, 8), torch.randint(0, 10, (6,))
    assert algo(x, mode="tensor").shape == (6, 10)
    assert algo(x, mode="predict").tolist() == algo(x).argmax(1).tolist()
    losses = algo(x, y, mode="loss")
    assert set(losses) == {"loss"} and losses["loss"].dim() == 0
    with pytest.raises(ConfigError, match="mode='loss', 'tensor' or 'predict'"):
        algo(x, mode="train")
    with pytest.raises(ConfigError, match="architecture must be a torch.nn.Module or a config dict"):
        BaseAlgorithm("resnet")
    nested = BaseAlgorithm(BaseAlgorithm(_cnn(4), data_preprocessor=lambda t: t * 0))
    assert torch.equal(nested(x, mode="tensor"), nested(torch.zeros_like(x), mode="tensor"))


def test_single_teacher_distill_trains_the_student_only():
    torch.manual_seed(0)
    teacher, student = _cnn(8), _cnn(4)
    teacher.train()
    before = copy.deepcopy(teacher.state_dict())
    algo = build(dict(type="SingleTeacherDistill", architecture=student, teacher=teacher, distiller=_distiller()))
    algo.train()
    assert not algo.teacher.training and algo.architecture.training  # the teacher's norms stay in eval mode
    x_train, y_train, _, _ = digits_split()
    batches = [(x_train[i:i + 64], y_train[i:i + 64]) for i in range(0, 640, 64)]
    losses = algo(*batches[0], mode="loss")
    assert set(losses) == {"student.loss", "distill.loss_kl", "distill.loss_cwd", "distill.loss_at"}
    assert all(v.dim() == 0 for v in losses.values())
    trainable = [n for n, p in algo.named_parameters() if p.requires_grad]
    assert trainable and not any(n.startswith("teacher.") for n in trainable)
    assert any(n.startswith("distiller.connectors.up") for n in trainable)
    result = fit(algo, batches, loss=batch_loss, epochs=3, lr=3e-3, seed=0, progress=False)
    assert sum(result.losses[-3:]) < sum(result.losses[:3])
    for key, value in algo.teacher.state_dict().items():  # BatchNorm running stats untouched
        torch.testing.assert_close(value, before[key], msg=key)


def test_distill_errors_name_layers_shapes_and_keys():
    bad = SingleTeacherDistill(_cnn(4), _cnn(8), _distiller(connector=False))
    with pytest.raises(ConfigError, match=r"student layer '2'.*\(2, 4, 8, 8\).*teacher layer '2'.*\(2, 8, 8, 8\)"
                                          r".*Conv1x1Connector"):
        bad(torch.randn(2, 1, 8, 8), torch.tensor([1, 2]), mode="loss")
    cfg = _distiller()
    cfg["student_recorders"]["feat"]["source"] = "22"
    with pytest.raises(ConfigError, match="no module '22'.*Did you mean '2'"):
        SingleTeacherDistill(_cnn(4), _cnn(8), cfg)
    cfg = _distiller()
    cfg["loss_forward_mappings"]["loss_kl"] = dict(logits=dict(from_student=True, recorder="fc"))
    with pytest.raises(ConfigError, match=r"KLDivergence: expected keys \['preds_S', 'preds_T'\]"):
        SingleTeacherDistill(_cnn(4), _cnn(8), cfg)
