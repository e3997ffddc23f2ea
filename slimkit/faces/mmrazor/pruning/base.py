"""What the razor face's channel-pruning algorithms share: the mutator, a step counter, deploying."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from torch import nn

from slimkit.errors import ConfigError
from slimkit.faces.mmrazor.base import BaseAlgorithm
from slimkit.faces.mmrazor.builder import build
from slimkit.faces.mmrazor.pruning.mutators import ChannelMutator, mapping


class PruningAlgorithm(BaseAlgorithm):
    """A :class:`BaseAlgorithm` with a channel mutator prepared on its architecture (not registered).

    ``mutator``: a mutator of ``mutator_class`` or its config dict; ``dummy_input`` (slimkit's addition): the
    input the model is traced on, instead of a random one of ``parse_cfg.demo_input``'s shape. Every
    training-mode ``mode="loss"`` call counts one step (``self.iteration``). :meth:`deploy` makes the pruning
    physical and returns the architecture; ``kept_channels`` then holds the replay record.
    """

    mutator_class: ClassVar[type[ChannelMutator]] = ChannelMutator
    default_mutator: ClassVar[dict[str, Any]] = {"type": "ChannelMutator"}

    def __init__(self, architecture: nn.Module | Mapping[str, Any], mutator: Any = None,
                 data_preprocessor: Any = None, init_cfg: Mapping[str, Any] | None = None,
                 dummy_input: Any = None) -> None:
        super().__init__(architecture, data_preprocessor, mapping(init_cfg, "init_cfg") or None)
        self.init_weights()
        built = build(dict(mutator) if isinstance(mutator, Mapping) else self.default_mutator) \
            if mutator is None or isinstance(mutator, Mapping) else mutator
        if not isinstance(built, self.mutator_class):
            raise ConfigError(f"{type(self).__name__} needs a {self.mutator_class.__name__} (dict(type="
                              f"'{self.mutator_class.__name__}', ...)), got {type(built).__name__}.")
        built.prepare_from_supernet(self.architecture, dummy_input)
        self.mutator = built
        self.iteration = 0
        self.kept_channels: dict[str, Any] | None = None

    @property
    def units(self) -> Any:
        """The mutator's :class:`~slimkit.engines.pruning.channel_units.ChannelUnits`."""
        return self.mutator.prepared

    def loss(self, inputs: Any, data_samples: Any = None) -> dict:
        """The task loss; in training mode one step of the algorithm's schedule first (:meth:`before_step`)."""
        self._check_live()
        if self.training:
            self.before_step()
            self.iteration += 1
        return super().loss(inputs, data_samples)

    def before_step(self) -> None:
        """What happens before each training step (nothing by default)."""

    def _check_live(self) -> None:
        if self.kept_channels is not None:
            raise ConfigError(f"{type(self).__name__} was deployed; train the returned architecture directly.")

    def finish(self) -> dict[str, Any]:
        """Make the masks physical; returns ``kept_channels`` (subclasses bake their own state first)."""
        return self.units.deploy()

    def deploy(self) -> nn.Module:
        """The architecture with the pruned channels removed (physically smaller); idempotent."""
        if self.kept_channels is None:
            self.kept_channels = self.finish()
        return self.architecture
