"""DSNAS: one drawn candidate per step, alpha stepped by DSNAS's credit estimator, uniform pre-training, the
argmax architecture fixed for fine-tuning and exported (our own config on the tiny MobileNetV2 space)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from slimkit.engines.nas import DiffMutableOP, OneHotMutableOP
from slimkit.errors import ConfigError
from slimkit.evaluation import count_parameters
from slimkit.razor import DSNAS, batch_loss, build, load_config
from slimkit.training import fit
from tests.faces.mmrazor.mm_models import ImageClassifier, images

NAS = Path(__file__).parent / "configs" / "nas"


def tiny() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(OneHotMutableOP({"lin": nn.Linear(4, 4), "skip": nn.Identity(), "neg": nn.Tanh()}),
                         nn.Linear(4, 3))


def test_dsnas_steps_alpha_by_the_credit_of_the_drawn_candidate():
    net = tiny()
    algo = DSNAS(net, pretrain_epochs=0, finetune_epochs=3, arch_optimizer=dict(type="SGD", lr=1.0))
    op = net[0]
    x, y = torch.randn(8, 4), torch.randint(3, (8,))
    fit(algo, [(x, y)], loss=batch_loss, steps=1, lr=0.1, optimizer="sgd", seed=0, progress=False, num_threads=1)
    drawn, credit = op.drawn, float(op.arch_weights.grad.sum())
    assert op.arch_weights.grad.nonzero().flatten().tolist() in ([drawn], [])  # only the drawn entry is used
    alpha = op.arch_param.detach().clone()
    probs = torch.softmax(alpha, 0)
    onehot = torch.nn.functional.one_hot(torch.tensor(drawn), 3).float()
    assert algo.arch_step()
    assert torch.allclose(op.arch_param, alpha - credit * (onehot - probs), atol=1e-6)
    assert not algo.arch_step()  # nothing new until the next backward


def test_dsnas_pretrains_uniformly_then_fixes_the_argmax_for_fine_tuning():
    net = tiny()
    algo = DSNAS(net, pretrain_epochs=1, finetune_epochs=2, arch_optimizer=dict(type="SGD", lr=1.0))
    op = net[0]
    assert op.uniform
    fit(algo, [(torch.randn(8, 4), torch.randint(3, (8,)))], loss=batch_loss, steps=2, lr=0.1, seed=0,
        progress=False, num_threads=1)
    assert not algo.arch_step() and torch.allclose(op.arch_param, op.arch_param.detach())  # epoch 0: no search
    before = op.arch_param.detach().clone()
    fit(algo, [(torch.randn(8, 4), torch.randint(3, (8,)))], loss=batch_loss, epochs=1, lr=0.1, seed=1,
        progress=False, num_threads=1, on_epoch=lambda e: algo.set_epoch(1))
    algo.set_epoch(2)  # the fine-tuning phase: the argmax is fixed (after the pending alpha step)
    assert not op.uniform and op.fixed and not torch.equal(op.arch_param, before)
    assert op.current_choice == op.argmax_choice()
    with torch.no_grad():
        x = torch.randn(2, 4)
        assert torch.equal(net(x), net[1](op.candidates[op.current_choice](x)))
    assert algo.search_subnet() == {"0": {"chosen": op.current_choice}}
    with pytest.raises(ConfigError, match="pretrain_epochs \\(3\\) must be below finetune_epochs \\(2\\)"):
        DSNAS(tiny(), pretrain_epochs=3, finetune_epochs=2)
    with pytest.raises(ConfigError, match="OneHotMutableOP choices"):
        DSNAS(nn.Sequential(DiffMutableOP({"a": nn.Linear(2, 2), "b": nn.Identity()})), finetune_epochs=2)


@pytest.mark.slow
def test_dsnas_config_searches_and_exports_a_smaller_subnet():
    cfg = load_config(NAS / "dsnas_mobilenet_supernet.py")
    torch.manual_seed(0)
    net = ImageClassifier(build(cfg.nas_backbone), 96)
    algo = build(cfg.model, architecture=net, arch_optimizer=cfg.optim_wrapper.mutator)
    assert isinstance(algo, DSNAS) and len(algo.ops) == 4 and algo.arch_optimizer_cfg["type"] == "Adam"
    data = images(2, size=16)
    start = {n: op.arch_param.detach().clone() for n, op in algo.ops.items()}
    fit(algo, data, loss=batch_loss, epochs=4, lr=0.05, seed=0, progress=False, num_threads=1,
        on_epoch=algo.set_epoch)
    assert algo.epoch == 3 and any(not torch.equal(op.arch_param, start[n]) for n, op in algo.ops.items())
    subnet = algo.export()
    assert not any(isinstance(m, OneHotMutableOP) for m in subnet.modules())
    assert count_parameters(subnet) < count_parameters(net) / 3


def test_one_hot_op_fixes_its_choice_once_the_leading_probability_passes_fix_threshold():
    torch.manual_seed(0)
    op = build(dict(type="mmrazor.OneHotMutableOP", fix_threshold=0.3,
                    candidates=dict(a=dict(type="mmrazor.DartsZero"), b=dict(type="mmrazor.DartsSkipConnect")),
                    module_kwargs=dict(in_channels=2, out_channels=2)))
    x = torch.rand(1, 2, 4, 4)
    with torch.no_grad():
        op.arch_param.copy_(torch.tensor([0.0, 0.5]))  # softmax gap 0.245 < 0.3: still drawing
    op.train()
    op(x)
    assert not op.fixed and op.arch_weights is not None
    with torch.no_grad():
        op.arch_param.copy_(torch.tensor([0.0, 0.7]))  # gap 0.336 >= 0.3: fixed to 'b' from now on
    assert torch.equal(op(x), x) and op.fixed and op.current_choice == "b"
    with pytest.raises(ConfigError, match=r"fix_threshold must be a number in \[0, 1\]"):
        OneHotMutableOP({"a": nn.Identity()}, fix_threshold=1.5)
