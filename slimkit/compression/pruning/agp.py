"""Automated Gradual Pruning (Zhu & Gupta, 2017): raise sparsity during training on a cubic schedule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.compression.pruning.compressor import Pruner
from slimkit.compression.pruning.config import PruningConfigError
from slimkit.compression.pruning.maskers import MaskDict
from slimkit.compression.pruning.one_shot import LevelPruner, WeightFilterPruner
from slimkit.compression.pruning.wrapper import PrunerModuleWrapper
from slimkit.core import registry
from slimkit.errors import AlgorithmNotFoundError


def agp_engine(pruning_algorithm: str | type[Pruner]) -> type[Pruner]:
    """The one-shot weight pruner whose masker AGP runs, from a registry name or the pruner class itself.

    Any name the registry knows works (``"l1"``, ``"l1_filter"``, ``"L1FilterPruner"``, ``"level"``...).

    AGP re-ranks the weights at every pruning iteration, so only pruners that need nothing but the weights
    qualify (level and the filter-norm pruners); the error lists them.
    """
    engine = pruning_algorithm
    if isinstance(pruning_algorithm, str):
        try:
            engine = registry.get(pruning_algorithm).engine
        except AlgorithmNotFoundError:
            engine = None
    if isinstance(engine, type) and issubclass(engine, (LevelPruner, WeightFilterPruner)):
        return engine
    usable = [n for n in registry.by_kind("pruning")
              if isinstance(registry.get(n).engine, type) and issubclass(registry.get(n).engine, (LevelPruner,
                                                                                               WeightFilterPruner))]
    usable += [a for a, n in registry.aliases().items() if n in usable and a.islower()]
    raise PruningConfigError(
        f"AGPPruner pruning_algorithm {pruning_algorithm!r} cannot be used; AGP re-ranks weights at every step, so "
        f"it takes a weight-only pruner: {', '.join(sorted(usable))} (or their NNI class names)."
    )


def agp_sparsity(final: float, initial: float, t: int, num_iterations: int) -> float:
    """``final + (initial - final) * (1 - t / n)^3`` with ``t`` clamped to ``[0, n]``."""
    progress = min(max(t, 0), num_iterations) / num_iterations
    return final + (initial - final) * (1.0 - progress) ** 3


class AGPPruner(Pruner):
    """Gradual pruning: each layer's sparsity goes from ``initial_sparsity`` to its config ``sparsity``.

    Pruning iteration ``t`` is ``steps // frequency`` (``schedule="step"``: counted by the patched
    ``optimizer.step()`` or :meth:`step`) or ``epoch // frequency`` (``schedule="epoch"``: set by
    :meth:`update_epoch`). At iteration ``t`` a layer's target is
    ``final + (initial - final) * (1 - t / num_iterations)^3``; masks are recomputed whenever ``t`` changes
    and never shrink (already pruned units stay pruned). ``pruning_algorithm`` picks the masker:
    ``level`` (unstructured), ``l1``/``l2``/``fpgm`` (filters).
    """

    iterative = True

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        optimizer: torch.optim.Optimizer | None = None,
        pruning_algorithm: str = "level",
        initial_sparsity: float = 0.0,
        num_iterations: int = 10,
        frequency: int = 1,
        schedule: str = "step",
        dummy_input: Any = None,
    ) -> None:
        engine = agp_engine(pruning_algorithm)
        for label, value in (("num_iterations", num_iterations), ("frequency", frequency)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PruningConfigError(f"AGPPruner {label} must be an int >= 1, got {value!r}.")
        if schedule not in ("step", "epoch"):
            raise PruningConfigError(f"AGPPruner schedule must be 'step' or 'epoch', got {schedule!r}.")
        if not 0.0 <= float(initial_sparsity) < 1.0:
            raise PruningConfigError(f"AGPPruner initial_sparsity must be in [0, 1), got {initial_sparsity!r}.")
        self.pruning_algorithm = pruning_algorithm
        self.default_op_types, self.supported_op_types = engine.default_op_types, engine.supported_op_types
        self.initial_sparsity = float(initial_sparsity)
        self.num_iterations = num_iterations
        self.frequency = frequency
        self.schedule = schedule
        self.epoch = 0
        super().__init__(model, config_list, optimizer, dummy_input)
        self.set_wrappers_attribute("pruned_at_iteration", -1)
        self.masker = engine.masker_class(model, self)

    def _select_layers(self) -> list[tuple[str, nn.Module, dict[str, Any]]]:
        layers = super()._select_layers()
        for name, _, config in layers:
            if config["sparsity"] < self.initial_sparsity:
                raise PruningConfigError(
                    f"Layer {name!r}: final sparsity {config['sparsity']} is below initial_sparsity "
                    f"{self.initial_sparsity}; AGP only increases sparsity."
                )
        return layers

    @property
    def current_iteration(self) -> int:
        """The pruning iteration ``t`` (clamped to ``num_iterations``)."""
        counter = self.step_count if self.schedule == "step" else self.epoch
        return min(counter // self.frequency, self.num_iterations)

    def target_sparsity(self, wrapper: PrunerModuleWrapper, iteration: int | None = None) -> float:
        """The layer's scheduled sparsity at ``iteration`` (default: the current one)."""
        t = self.current_iteration if iteration is None else iteration
        return agp_sparsity(wrapper.config["sparsity"], self.initial_sparsity, t, self.num_iterations)

    def calc_mask(self, wrapper: PrunerModuleWrapper, wrapper_idx: int | None = None) -> MaskDict | None:
        """Recompute the layer's masks when the iteration changed since its last update."""
        t = self.current_iteration
        if wrapper.pruned_at_iteration == t:
            return None
        wrapper.pruned_at_iteration = t
        wrapper.if_calculated = True
        return self.masker.calc_mask(self.target_sparsity(wrapper, t), wrapper, wrapper_idx)

    def step(self) -> None:
        """Advance one training step by hand (what the patched ``optimizer.step()`` does)."""
        self._on_optimizer_step()

    def update_epoch(self, epoch: int) -> None:
        """Start ``epoch``; with ``schedule="epoch"`` masks move to that epoch's target right away."""
        self.epoch = int(epoch)
        if self.schedule == "epoch":
            self.update_mask()
            if self.optimizer is not None:
                for wrapper in self.modules_wrapper:
                    wrapper.apply_masks_to_module()
