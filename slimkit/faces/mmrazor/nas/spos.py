"""SPOS: Single Path One-Shot NAS (Guo et al., 2020) -- train a supernet one uniformly sampled path per step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from slimkit.engines.nas.mutator import NasMutator, Subnet
from slimkit.errors import ConfigError
from slimkit.faces.mmrazor.base import BaseAlgorithm
from slimkit.faces.mmrazor.builder import build, register_module


@register_module()
class SPOS(BaseAlgorithm):
    """The supernet (``architecture``) trained with a uniformly sampled subnet per training step.

    ``mutator``: a :class:`NasMutator` or its config (default ``dict(type="NasMutator")``). In training mode
    ``mode="loss"`` samples a fresh subnet (torch's RNG, so :func:`slimkit.training.fit`'s ``seed`` makes the
    paths reproducible) and returns the task loss of that path; ``"tensor"`` / ``"predict"`` run the active
    subnet, which :meth:`set_subnet` fixes (e.g. to evaluate a candidate during the search).
    ``norm_training=True`` keeps the supernet's batch norms in training mode when the algorithm is put in eval
    mode, so each candidate is scored with the statistics of the batch it sees (MMRazor's search configs set it:
    the shared running statistics fit no single path). References: SPOS (arXiv:1904.00420), MMRazor's ``SPOS``.
    """

    def __init__(self, architecture: nn.Module | Mapping[str, Any],
                 mutator: NasMutator | Mapping[str, Any] | None = None, norm_training: bool = False,
                 data_preprocessor: Any = None, init_cfg: Mapping[str, Any] | None = None) -> None:
        super().__init__(architecture, data_preprocessor, init_cfg)
        self.norm_training = bool(norm_training)
        if isinstance(mutator, Mapping):
            mutator = build(mutator)
        mutator = NasMutator() if mutator is None else mutator
        if not isinstance(mutator, NasMutator):
            raise ConfigError(f"SPOS mutator must be a NasMutator or dict(type='NasMutator'), got "
                              f"{type(mutator).__name__}.")
        mutator.prepare_from_supernet(self.architecture)
        self.mutator = mutator
        self.init_weights()

    def train(self, mode: bool = True) -> SPOS:
        """Set the mode; with ``norm_training``, batch norms stay in training mode in eval mode too."""
        super().train(mode)
        if self.norm_training and not mode:
            for module in self.architecture.modules():
                if isinstance(module, nn.modules.batchnorm._BatchNorm):
                    module.train()
        return self

    def sample_subnet(self) -> Subnet:
        """A uniformly random subnet ``{name: choice}`` (torch's global RNG)."""
        return self.mutator.sample_choices()

    def set_subnet(self, subnet: Mapping[str, Any]) -> None:
        """Make ``subnet`` (``{name: choice}`` or ``{name: {"chosen": choice}}``) the active path."""
        self.mutator.set_choices(subnet)

    def loss(self, inputs: Any, data_samples: Any = None) -> dict[str, torch.Tensor]:
        """Task loss of a freshly sampled path (training mode) or of the active one (eval mode)."""
        if self.training:
            self.set_subnet(self.sample_subnet())
        return super().loss(inputs, data_samples)
