"""SlimmableNetwork: MMRazor's slimmable network -- several widths trained on shared weights."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from slimkit.engines.pruning.slimmable import SlimmableWidths
from slimkit.errors import ConfigError
from slimkit.faces.mmrazor.builder import register_module
from slimkit.faces.mmrazor.pruning.base import PruningAlgorithm
from slimkit.faces.mmrazor.pruning.mutators import SlimmableChannelMutator


@register_module()
class SlimmableNetwork(PruningAlgorithm):
    """Slimmable neural networks (Yu et al., ICLR 2019; MMRazor's ``SlimmableNetwork``).

    The mutator's ``units`` list each unit's candidate widths; candidate ``i`` of every unit is subnet ``i``.
    Each training step sums the task losses of all subnets (``subnet_<i>.loss``), every subnet with its own
    batch-norm statistics (:class:`~slimkit.engines.pruning.slimmable.SlimmableWidths`). :meth:`set_subnet`
    picks the width the eval modes run; ``deploy_index`` (or :meth:`deploy_subnet`) keeps one width for real.
    """

    mutator_class = SlimmableChannelMutator
    default_mutator = {"type": "SlimmableChannelMutator"}

    def __init__(self, architecture: nn.Module | Mapping[str, Any], mutator: Any = None, deploy_index: int = -1,
                 data_preprocessor: Any = None, init_cfg: Mapping[str, Any] | None = None,
                 dummy_input: Any = None) -> None:
        if isinstance(deploy_index, bool) or not isinstance(deploy_index, int):
            raise ConfigError(f"SlimmableNetwork deploy_index must be a subnet index (int; -1: none), got "
                              f"{deploy_index!r}.")
        super().__init__(architecture, mutator, data_preprocessor, init_cfg, dummy_input)
        self.widths = SlimmableWidths(self.units, self.mutator.subnets)
        self.num_subnet = len(self.widths.subnets)
        self.deploy_index = deploy_index
        self.widths.switch(0)
        if deploy_index != -1:
            self.deploy_subnet(deploy_index)

    @property
    def is_deployed(self) -> bool:
        """Whether one width was kept for real."""
        return self.kept_channels is not None

    def set_subnet(self, index: int) -> None:
        """Run subnet ``index`` (its widths and batch-norm statistics) from now on."""
        self._check_live()
        self.widths.switch(index)

    def loss(self, inputs: Any, data_samples: Any = None) -> dict[str, torch.Tensor]:
        """Training: every subnet's task loss; eval or deployed: the current network's."""
        if self.is_deployed or not self.training:
            return self.student_loss(inputs, data_samples)[0]
        self.iteration += 1
        total: dict[str, torch.Tensor] = {}
        for index in range(self.num_subnet):
            self.widths.switch(index)
            total.update({f"subnet_{index}.{k}": v for k, v in self.student_loss(inputs, data_samples)[0].items()})
        return total

    def deploy_subnet(self, index: int) -> nn.Module:
        """Keep subnet ``index`` only, physically; returns the architecture."""
        self._check_live()
        self.kept_channels = self.widths.deploy(index)
        return self.architecture

    def finish(self) -> dict[str, Any]:
        """Deploy the active subnet (``deploy_index``, else the one last set)."""
        return self.widths.deploy(self.widths.active if self.widths.active is not None else 0)
