"""NNI 3.0's layer-wise distillers (our own 3.0-style scripts): the loss they add, links, adapters, bad keys."""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from slimkit.compression.distillation import Adaptive1dLayerwiseDistiller, DynamicLayerwiseDistiller
from slimkit.errors import ConfigError
from slimkit.faces.nni.v3 import TorchEvaluator
from tests.faces.nni.v3.loop import make_training_func, training_step


def _rows(seed: int = 0, n: int = 2):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 4, generator=generator), torch.randint(0, 3, (8,), generator=generator))
            for _ in range(n)]


def _pair(width: int = 3):
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 3))
    student = copy.deepcopy(teacher)
    with torch.no_grad():
        for p in student.parameters():
            p.add_(0.3 * torch.randn_like(p))
    if width != 3:
        student[0] = nn.Linear(4, width)
        student[2] = nn.Linear(width, 3)
    return student, teacher


def _evaluator(model, rows, losses, lr=0.0):
    return TorchEvaluator(make_training_func(rows, losses), torch.optim.SGD(model.parameters(), lr=lr),
                          training_step)


def test_signatures_are_nni_30s():
    for cls in (DynamicLayerwiseDistiller, Adaptive1dLayerwiseDistiller):
        assert list(inspect.signature(cls).parameters) == ["model", "config_list", "evaluator", "teacher_model",
                                                           "teacher_predict", "origin_loss_lambda",
                                                           "existed_wrappers"]


def test_dynamic_distiller_adds_lambda_times_the_closest_teacher_layers_loss():
    student, teacher = _pair()
    rows, losses = _rows(), []
    config = [{"op_names": ["2"], "lambda": 0.5, "link": ["0", "2"], "apply_method": "mse"},
              {"op_names": ["0"], "lambda": 2.0, "apply_method": "mse"}]
    distiller = DynamicLayerwiseDistiller(student, config, _evaluator(student, rows, losses), teacher,
                                          lambda batch, model: model(batch[0]), origin_loss_lambda=0.25)
    x, y = rows[0]
    with torch.no_grad():
        hidden_s, hidden_t = student[0](x), teacher[0](x)
        out_s, out_t = student(x), teacher(x)
        expected = 0.25 * F.cross_entropy(out_s, y) + 0.5 * min(F.mse_loss(out_s, hidden_t),
                                                                F.mse_loss(out_s, out_t)) \
            + 2.0 * F.mse_loss(hidden_s, hidden_t)
    assert distiller.compress(max_steps=2, max_epochs=None) is student
    assert len(losses) == 2 and losses[0] == pytest.approx(float(expected), rel=1e-5)
    assert not any(m._forward_hooks for m in [*student.modules(), *teacher.modules()])  # recording removed


def test_kl_distillation_pulls_the_students_logits_to_the_teachers():
    student, teacher = _pair()
    rows = _rows(n=4)
    config = [{"op_names": ["2"], "lambda": 1.0, "apply_method": "kl"}]
    x = torch.cat([r[0] for r in rows])

    def gap() -> float:
        with torch.no_grad():
            return float(F.kl_div(F.log_softmax(student(x), -1), F.softmax(teacher(x), -1), reduction="batchmean"))

    before = gap()
    distiller = DynamicLayerwiseDistiller(student, config, _evaluator(student, rows, [], lr=0.5), teacher,
                                          lambda batch, model: model(batch[0]), origin_loss_lambda=0.0)
    distiller.compress(max_steps=None, max_epochs=5)
    assert gap() < 0.5 * before


def test_adaptive_distiller_trains_a_linear_between_different_widths():
    student, teacher = _pair(width=5)
    rows, losses = _rows(), []
    evaluator = _evaluator(student, rows, losses, lr=0.1)
    distiller = Adaptive1dLayerwiseDistiller(student, [{"op_names": ["0"], "lambda": 1.0}], evaluator, teacher,
                                             lambda batch, model: model(batch[0]))
    distiller.track_forward(rows[0][0])
    connector = distiller.targets["0"].connector
    assert (connector.linear.in_features, connector.linear.out_features) == (5, 3)
    before = connector.linear.weight.detach().clone()
    distiller.compress(max_steps=2, max_epochs=None)
    groups = evaluator.optimizers[0].param_groups
    assert any(p is connector.linear.weight for g in groups for p in g["params"])
    assert not torch.equal(before, connector.linear.weight) and len(losses) == 2


@pytest.mark.parametrize(("entry", "message"), [
    ({"op_names": ["0"], "lamda": 1.0}, "unknown key 'lamda'.*Did you mean 'lambda'"),
    ({"op_names": ["0"], "apply_method": "cosine"}, "'mse' \\(hidden states\\) or 'kl' \\(logits\\)"),
    ({"op_names": ["0"], "link": "9"}, "the teacher has no layer '9'"),
    ({"op_names": ["0"], "target_names": ["weight"]}, "must be \\['_output_'\\]"),
    ({"op_names": ["0"], "lambda": -1}, "'lambda'\\] must be a number >= 0"),
])
def test_bad_distillation_keys_are_refused_clearly(entry, message):
    student, teacher = _pair()
    with pytest.raises(ConfigError, match=message):
        DynamicLayerwiseDistiller(student, [entry], _evaluator(student, [], []), teacher, lambda b, m: m(b[0]))


def test_adaptive_distiller_links_one_teacher_layer_and_needs_shapes():
    student, teacher = _pair(width=5)
    with pytest.raises(ConfigError, match="one teacher layer"):
        Adaptive1dLayerwiseDistiller(student, [{"op_names": ["0"], "link": ["0", "2"]}],
                                     _evaluator(student, [], []), teacher, lambda b, m: m(b[0]))
    distiller = Adaptive1dLayerwiseDistiller(student, [{"op_names": ["0"]}], _evaluator(student, _rows(), []),
                                             teacher, lambda b, m: m(b[0]))
    with pytest.raises(ConfigError, match="call distiller.track_forward"):
        distiller.compress(max_steps=1, max_epochs=None)
