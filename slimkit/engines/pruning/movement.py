"""Movement pruning (Sanh et al., 2020): keep the weights that fine-tuning moves away from zero.

Every selected weight has a score ``S``, learned during fine-tuning. The layer computes with ``W * M``,
where ``M`` keeps the top-scoring units; the mask passes gradients straight through, so the loss gradient of
a score is ``dL/dS = dL/dW' * W`` (``W' = W * M``) and each backward pass updates ``S -= dL/dW' * W``: a
weight whose update pushes it away from zero gains score. Pruned weights keep their values and can come
back when their score rises. The sparsity follows AGP's cubic schedule from 0 at ``warm_up_step`` to the
config ``sparsity`` at ``cool_down_beginning_step`` and stays there. ``granularity="fine"`` ranks single
weights (unstructured); ``"filter"`` ranks whole output channels by their summed score, which
``ModelSpeedup`` removes for real.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.engines.pruning.agp import agp_sparsity
from slimkit.engines.pruning.compressor import Pruner
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.maskers import MaskDict, channel_masks, lowest_indices, num_to_prune
from slimkit.engines.pruning.one_shot import FILTER_OP_TYPES, LEVEL_OP_TYPES
from slimkit.engines.pruning.training import Trainer, check_positive, check_positive_int, run_epoch
from slimkit.engines.pruning.wrapper import PrunerModuleWrapper
from slimkit.training import criterion_loss, default_loss, fit

GRANULARITIES = ("fine", "filter")


class MovementWrapper(PrunerModuleWrapper):
    """A pruner wrapper that also learns a movement score per weight from the gradient of the masked weight."""

    def __init__(self, module: nn.Module, module_name: str, module_type: str, config: dict[str, Any]) -> None:
        super().__init__(module, module_name, module_type, config)
        self.register_buffer("movement_score", torch.zeros_like(module.weight, dtype=torch.float32))

    def masked_parameters(self) -> dict[str, torch.Tensor]:
        """Masked weight and bias; while gradients flow, the masked weight reports its gradient to the score."""
        params = super().masked_parameters()
        if params["weight"].requires_grad and torch.is_grad_enabled():
            params["weight"].register_hook(self._learn)
        return params

    def _learn(self, grad: torch.Tensor) -> None:
        self.movement_score.sub_((grad.detach() * self.module.weight.detach()).float())


class MovementEngine(Pruner):
    """Prune by movement scores learned while fine-tuning (the sparsity rises on a cubic schedule).

    ``MovementPruner(model, config_list, trainer=None, traced_optimizer=None, criterion=None,
    training_epochs=None, training_steps=None, warm_up_step=0, cool_down_beginning_step=None, *,
    optimizer=None, dataloader=None, granularity="fine", lr=1e-3)`` (NNI 2.x's order; ``optimizer`` and
    ``traced_optimizer`` are the same thing). Train in your own loop with that optimizer (each ``step()`` updates
    the masks), or let :meth:`compress` train ``training_epochs`` epochs (or ``training_steps`` steps) with
    ``trainer(model, optimizer, criterion)`` or on ``dataloader`` batches through slimkit's loop.
    ``cool_down_beginning_step`` (when the final sparsity is reached) defaults to two thirds of the planned steps
    when ``training_steps``, or ``dataloader`` with ``training_epochs``, fix them.
    """

    user_name = "MovementPruner"  # NNI 1.x's name for it (slimkit.faces.nni.v1)
    iterative = True
    layer_wrapper = MovementWrapper

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        trainer: Trainer | None = None,
        traced_optimizer: torch.optim.Optimizer | None = None,
        criterion: Callable[..., torch.Tensor] | None = None,
        training_epochs: int | None = None,
        training_steps: int | None = None,
        warm_up_step: int = 0,
        cool_down_beginning_step: int | None = None,
        *,
        optimizer: torch.optim.Optimizer | None = None,
        dataloader: Any = None,
        granularity: str = "fine",
        lr: float = 1e-3,
        dummy_input: Any = None,
        seed: int = 0,
    ) -> None:
        who = self.display_name()
        if optimizer is not None and traced_optimizer is not None and optimizer is not traced_optimizer:
            raise PruningConfigError(f"{who} got two optimizers (optimizer= and traced_optimizer=); pass one.")
        optimizer = optimizer if optimizer is not None else traced_optimizer
        if granularity not in GRANULARITIES:
            raise PruningConfigError(f"{who} granularity must be 'fine' (single weights) or 'filter' (output "
                                     f"channels, removable by the speedup), got {granularity!r}.")
        self.warm_up_step = check_positive_int(who, "warm_up_step", warm_up_step, minimum=0)
        trains_itself = trainer is not None or dataloader is not None
        self.training_steps = None if training_steps is None else check_positive_int(who, "training_steps",
                                                                                     training_steps)
        self.training_epochs = training_epochs
        if trains_itself and self.training_steps is None:
            self.training_epochs = check_positive_int(who, "training_epochs", training_epochs or 0)
        elif not trains_itself and optimizer is None:
            raise PruningConfigError(f"{who} learns its scores while the model trains: pass the optimizer of your "
                                     "training loop, or trainer=... / dataloader=... with training_epochs=N.")
        if cool_down_beginning_step is None:
            planned = self.training_steps
            if planned is None and dataloader is not None and trainer is None and hasattr(dataloader, "__len__"):
                planned = self.training_epochs * len(dataloader)
            if planned is not None:
                cool_down_beginning_step = self.warm_up_step + max(1, 2 * (planned - self.warm_up_step) // 3)
        if cool_down_beginning_step is None:
            raise PruningConfigError(f"{who} needs cool_down_beginning_step (the optimizer step at which the final "
                                     "sparsity is reached); it is inferred only from training_steps=, or from "
                                     "dataloader= with training_epochs=.")
        self.cool_down_beginning_step = check_positive_int(who, "cool_down_beginning_step", cool_down_beginning_step,
                                                           minimum=self.warm_up_step + 1)
        check_positive(who, "lr", lr)
        self.granularity, self.trainer, self.criterion, self.dataloader = granularity, trainer, criterion, dataloader
        self.lr, self.seed = lr, seed
        self.default_op_types = ("Conv2d", "Linear")
        self.supported_op_types = LEVEL_OP_TYPES if granularity == "fine" else FILTER_OP_TYPES
        super().__init__(model, config_list, optimizer, dummy_input)

    def current_sparsity(self, wrapper: PrunerModuleWrapper) -> float:
        """The layer's scheduled sparsity at the current optimizer step."""
        if self.step_count < self.warm_up_step:
            return 0.0
        return agp_sparsity(float(wrapper.config["sparsity"]), 0.0, self.step_count - self.warm_up_step,
                            self.cool_down_beginning_step - self.warm_up_step)

    def calc_mask(self, wrapper: PrunerModuleWrapper, wrapper_idx: int | None = None) -> MaskDict | None:
        """Keep the top-scoring units at the scheduled sparsity (masks may change either way)."""
        score = wrapper.movement_score
        sparsity = self.current_sparsity(wrapper)
        wrapper.if_calculated = True
        if self.granularity == "filter":
            per_channel = score.reshape(score.shape[0], -1).sum(dim=1)
            keep = torch.ones(per_channel.numel(), device=score.device)
            keep[lowest_indices(per_channel, num_to_prune(sparsity, per_channel.numel()))] = 0
            return channel_masks(wrapper, keep)
        flat = score.flatten()
        mask = torch.ones_like(flat)
        mask[lowest_indices(flat, num_to_prune(sparsity, flat.numel()))] = 0
        bias = None if wrapper.bias_mask is None else torch.ones_like(wrapper.bias_mask)
        return {"weight_mask": mask.reshape(score.shape).to(wrapper.weight_mask.dtype), "bias_mask": bias}

    def _on_optimizer_step(self) -> None:
        """Count the step and move the masks; the stored weights keep their values (they may come back)."""
        self.step_count += 1
        self.update_mask()

    def compress(self) -> nn.Module:
        """Train ``training_epochs`` epochs when a trainer or dataloader was given; then fix the final masks."""
        if self.trainer is None and self.dataloader is None:
            self.update_mask()
            return self.bound_model
        if self.optimizer is None:
            self.optimizer = torch.optim.Adam(self.bound_model.parameters(), lr=self.lr)
            self.patch_optimizer()
        epoch = 0
        while (self.training_steps is None and epoch < self.training_epochs) or (
                self.training_steps is not None and self.step_count < self.training_steps):
            if self.trainer is None and self.training_steps is not None:
                loss = criterion_loss(self.criterion) if self.criterion is not None else default_loss
                fit(self.bound_model, self.dataloader, loss=loss, optimizer=self.optimizer,
                    steps=self.training_steps - self.step_count, seed=self.seed, progress=False)
                break
            before = self.step_count
            run_epoch(self.bound_model, epoch, trainer=self.trainer, dataloader=self.dataloader,
                      optimizer=self.optimizer, criterion=self.criterion, seed=self.seed)
            if self.step_count == before:
                raise PruningConfigError("MovementPruner: the trainer ran an epoch without calling optimizer.step(); "
                                         "it must train with the optimizer it is given.")
            epoch += 1
        self.finish()
        return self.bound_model

    def finish(self) -> None:
        """Jump to the end of the schedule: masks at the final sparsity from the scores learned so far."""
        self.step_count = max(self.step_count, self.cool_down_beginning_step)
        self.update_mask()
        if not math.isfinite(float(sum(w.movement_score.abs().sum() for w in self.modules_wrapper))):
            raise PruningConfigError("MovementPruner: the scores are not finite; lower the learning rate.")
