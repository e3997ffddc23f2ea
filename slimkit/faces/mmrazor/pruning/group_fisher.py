"""GroupFisherAlgorithm: MMRazor's group Fisher channel pruning on slimkit's training loop."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from slimkit.engines.pruning.group_fisher import GroupFisherPruner
from slimkit.faces.mmrazor.builder import register_module
from slimkit.faces.mmrazor.pruning.base import PruningAlgorithm
from slimkit.faces.mmrazor.pruning.mutators import GroupFisherChannelMutator


@register_module()
class GroupFisherAlgorithm(PruningAlgorithm):
    """Group Fisher pruning (Liu et al., ICML 2021; MMRazor's ``GroupFisherAlgorithm``).

    Train it with :func:`slimkit.training.fit` (``loss=batch_loss``): each training step's activations and
    gradients at the inputs of the layers reading every channel unit give its Fisher information, normalised by
    the FLOPs or activation memory one channel costs (the mutator's ``normalization_type``); every ``interval``
    steps the least important channel of all units goes (:class:`~slimkit.engines.pruning.group_fisher.
    GroupFisherPruner`). ``target_flop_ratio`` (slimkit's addition; MMRazor's config gives it to a hook) stops
    pruning once the estimated MACs fall to that share. :meth:`deploy` returns the physically smaller model.
    """

    mutator_class = GroupFisherChannelMutator
    default_mutator = {"type": "GroupFisherChannelMutator"}

    def __init__(self, architecture: nn.Module | Mapping[str, Any], mutator: Any = None, interval: int = 10,
                 data_preprocessor: Any = None, init_cfg: Mapping[str, Any] | None = None,
                 target_flop_ratio: float | None = None, dummy_input: Any = None) -> None:
        super().__init__(architecture, mutator, data_preprocessor, init_cfg, dummy_input)
        self.pruner = GroupFisherPruner(self.units, interval, self.mutator.normalization_type, target_flop_ratio)
        self.interval = interval

    def loss(self, inputs: Any, data_samples: Any = None) -> dict:
        """The task loss; its backward pass feeds the Fisher information (and prunes every ``interval`` steps)."""
        losses = super().loss(inputs, data_samples)
        if self.training:
            self.pruner.arm()
        return losses

    def finish(self) -> dict[str, Any]:
        """Stop recording, remove the pruned channels."""
        return self.pruner.deploy()
