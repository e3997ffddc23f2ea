"""dsnas: DSNAS (Hu et al., CVPR 2020) on the model's own convolutions -- search and train in one run."""

from __future__ import annotations

from typing import Any

import torch
from ConfigSpace import UniformIntegerHyperparameter
from torch import nn

from slimkit.algorithms.distillation._conv_choices import ConvChoiceModels, choice_hyperparameters
from slimkit.core.contract import SaveFn, SlimkitDistiller, SmashConfigPrefixWrapper
from slimkit.core.registry import register
from slimkit.engines.nas import OneHotMutableOP
from slimkit.training import default_loss


@register
class DsnasSearch(ConvChoiceModels, SlimkitDistiller):
    """DSNAS over each eligible convolution: one candidate drawn per step, alpha from the draw's credit.

    The search space is ``darts``'s ({itself, 1x1, depthwise-separable, skip} per eligible conv), each choice a
    :class:`~slimkit.engines.nas.OneHotMutableOP`: a training forward runs one candidate drawn from
    ``softmax(alpha)`` (uniformly for the first ``pretrain_steps``), so one backward of slimkit's training loop
    gives the weights their gradient and alpha DSNAS's estimator (the loss's gradient on the draw's one-hot weight
    times ``one-hot - softmax(alpha)``), to which ``flops_weight`` adds the gradient of the expected MACs relative
    to the model's; alpha (Adam at ``arch_lr``) steps at the start of the next step. No retraining: the argmax
    candidates, trained in the supernet, are exported as plain layers; the save records each choice.
    """

    algorithm_name = "dsnas"
    dataset_required = True
    save_fn = SaveFn.REPLAY
    references = {"Paper (DSNAS)": "https://arxiv.org/abs/2002.09128",
                  "MMRazor DSNAS": "https://github.com/open-mmlab/mmrazor/tree/main/configs/nas/mmcls/dsnas"}

    def get_hyperparameters(self) -> list:
        """``darts``'s, plus the steps of uniform sampling before alpha moves."""
        return [*choice_hyperparameters(arch_lr=1e-3),
                UniformIntegerHyperparameter("pretrain_steps", 0, 10**7, default_value=0, meta={
                    "desc": "First steps drawing candidates uniformly with alpha left as it is (supernet warm-up)."})]

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        space = self.choices_for(model, smash_config, OneHotMutableOP)
        ops, penalty = list(space.ops.values()), float(smash_config["flops_weight"])
        warmup, done = int(smash_config["pretrain_steps"]), {"steps": 0, "arch_steps": 0}

        def arch_step() -> None:
            grads = [op.arch_gradient() for op in ops]  # the latest backward's credit (read once, then cleared)
            if done["steps"] <= warmup or all(g is None for g in grads):
                return
            extra = [None] * len(ops)
            if penalty > 0:
                extra = torch.autograd.grad(penalty * space.expected_macs(), [op.arch_parameter() for op in ops])
            for op, grad, more in zip(ops, grads, extra, strict=True):
                total = torch.zeros_like(op.arch_param) if grad is None else grad
                op.arch_param.grad = total if more is None else total + more.detach()
            space.arch_opt.step()
            done["arch_steps"] += 1

        def step_loss(net: nn.Module, batch: Any) -> torch.Tensor:
            arch_step()
            done["steps"] += 1
            for op in ops:
                op.uniform = done["steps"] <= warmup
            return default_loss(net, batch)

        trained = self.train(space, smash_config, step_loss)
        arch_step()  # the last backward's credit
        student, state = space.export(model.training)
        smash_config.state.update(state, supernet_steps=trained.steps, arch_steps=done["arch_steps"])
        return student

