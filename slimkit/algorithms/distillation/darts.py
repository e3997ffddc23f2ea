"""darts: DARTS (Liu, Simonyan & Yang, 2019) on the model's own convolutions, with a FLOPs penalty on the choice."""

from __future__ import annotations

from typing import Any

import torch
from ConfigSpace import UniformFloatHyperparameter
from torch import nn

from slimkit.algorithms.distillation._conv_choices import ConvChoiceModels, choice_hyperparameters
from slimkit.core.contract import SaveFn, SlimkitDistiller, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean
from slimkit.core.registry import register
from slimkit.engines.nas import DiffMutableOP
from slimkit.engines.nas.darts_step import arch_gradients
from slimkit.errors import ConfigError
from slimkit.training import default_loss, split_batch


@register
class DartsSearch(ConvChoiceModels, SlimkitDistiller):
    """DARTS over each eligible convolution: {itself, 1x1, depthwise-separable, skip}, mixed by softmax(alpha).

    Every eligible ``nn.Conv2d`` (odd kxk, k > 1, 'same' zero padding) becomes a
    :class:`~slimkit.engines.nas.DiffMutableOP` of those candidates (skip only where input and output shapes
    match; see :mod:`slimkit.algorithms.distillation._conv_choices`). Each step of slimkit's training loop first
    updates alpha (Adam at ``arch_lr``) on one half of the batch: task loss plus ``flops_weight`` x the expected MACs
    of the mixed choices relative to the model's MACs (the FLOPs budget as a penalty); the weights then train on the
    other half. ``unroll`` makes the alpha step second-order DARTS (the paper's unrolled approximation: alpha's
    gradient at the weights after a virtual SGD step of ``unroll_lr`` on the weights' half, corrected by a
    finite-difference Hessian-vector product; :mod:`slimkit.engines.nas.darts_step`), about 3x the cost of the
    first-order step. The argmax candidate of each choice is exported as plain layers: a chosen
    1x1, separable or skip is physically smaller. The save records each choice and rebuilds the layers before the
    weights load.
    """

    algorithm_name = "darts"
    dataset_required = True
    save_fn = SaveFn.REPLAY
    references = {"Paper (DARTS)": "https://arxiv.org/abs/1806.09055",
                  "MMRazor DARTS": "https://github.com/open-mmlab/mmrazor/tree/main/configs/nas/mmcls/darts"}

    def get_hyperparameters(self) -> list:
        """Training length, learning rates, the FLOPs penalty, batch size, seed, threads; first or second order."""
        return [*choice_hyperparameters(arch_lr=3e-4),
                Boolean("unroll", False, meta={"desc": "Second-order DARTS: alpha's gradient through a virtual step "
                                                       "of the weights (about 3x the cost of first order)."}),
                UniformFloatHyperparameter("unroll_lr", 1e-6, 1.0, default_value=0.025, meta={
                    "desc": "Learning rate of that virtual SGD step (xi; the paper uses the weights' SGD rate, "
                            "0.025). Read only with unroll."})]

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        space = self.choices_for(model, smash_config, DiffMutableOP)
        ops, penalty = space.ops, float(smash_config["flops_weight"])
        unroll_lr = float(smash_config["unroll_lr"]) if smash_config["unroll"] else None

        def step_loss(net: nn.Module, batch: Any) -> torch.Tensor:
            inputs, targets = split_batch(batch)
            if not isinstance(inputs, torch.Tensor) or targets is None:
                raise ConfigError("darts splits each batch in halves (alpha, weights): it needs tensor inputs with "
                                  "targets, as cfg.add_data('Digits') or (inputs, labels) datasets give.")
            if inputs.shape[0] < 2:  # a last batch of one sample trains the weights only
                return default_loss(net, batch)
            cut = inputs.shape[0] // 2
            held, train = (inputs[:cut], targets[:cut]), (inputs[cut:], targets[cut:])
            alphas = [op.arch_parameter() for op in ops.values()]

            def held_loss() -> torch.Tensor:
                loss = default_loss(net, held)
                return loss + penalty * space.expected_macs() if penalty > 0 else loss

            def set_arch_grad(on: bool) -> None:
                for op in ops.values():
                    op.arch_grad = on

            weights = [p for p in net.parameters() if p.requires_grad]
            _, grads = arch_gradients(lambda: default_loss(net, train), held_loss, alphas, weights, set_arch_grad,
                                      unroll_lr)
            for alpha, grad in zip(alphas, grads, strict=True):
                alpha.grad = grad.detach()
            space.arch_opt.step()
            return default_loss(net, train)

        trained = self.train(space, smash_config, step_loss)
        student, state = space.export(model.training)
        smash_config.state.update(state, supernet_steps=trained.steps)
        return student

