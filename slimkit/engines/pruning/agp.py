"""Automated Gradual Pruning (Zhu & Gupta, 2017): raise sparsity during training on a cubic schedule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.core import registry
from slimkit.engines.pruning.compressor import Pruner
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.maskers import MaskDict
from slimkit.engines.pruning.one_shot import LevelEngine, WeightFilterPruner
from slimkit.engines.pruning.training import check_positive_int
from slimkit.engines.pruning.wrapper import PrunerModuleWrapper
from slimkit.errors import AlgorithmNotFoundError, check_number


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
    if isinstance(engine, type) and issubclass(engine, (LevelEngine, WeightFilterPruner)):
        return engine
    usable = [n for n in registry.by_kind("pruning")
              if isinstance(registry.get(n).engine, type) and issubclass(registry.get(n).engine, (LevelEngine,
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


#: NNI 1.x's per-entry AGP keys (``final_sparsity`` is read as ``sparsity``)
EPOCH_KEYS = ("initial_sparsity", "start_epoch", "end_epoch", "frequency")


def _epoch_entries(config_list: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``config_list`` with NNI 1.x's ``final_sparsity`` read as ``sparsity`` (both given is an error)."""
    if isinstance(config_list, (str, bytes, Mapping)) or not isinstance(config_list, Sequence):
        return config_list  # resolve_config_list reports the shape error
    out = []
    for index, entry in enumerate(config_list):
        if isinstance(entry, Mapping) and "final_sparsity" in entry:
            if "sparsity" in entry or "sparsity_per_layer" in entry:
                raise PruningConfigError(f"config_list[{index}] gives 'final_sparsity' and 'sparsity'; they are the "
                                         "same (NNI 1.x and 2.x spelling), keep one.")
            entry = {("sparsity" if k == "final_sparsity" else k): v for k, v in entry.items()}
        out.append(entry)
    return out


def _check_epoch_keys(name: str, config: Mapping[str, Any]) -> None:
    for key in ("start_epoch", "end_epoch", "frequency"):
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or
                                  value < (1 if key == "frequency" else 0)):
            raise PruningConfigError(f"Layer {name!r}: AGP {key} must be a whole number >= "
                                     f"{1 if key == 'frequency' else 0}, got {value!r}.")
    initial = config.get("initial_sparsity", 0.0)
    check_number(f"Layer {name!r}: AGP initial_sparsity", initial, 0, 1, open_high=True, error=PruningConfigError)
    if config.get("end_epoch") is not None and config["end_epoch"] < config.get("start_epoch", 0):
        raise PruningConfigError(f"Layer {name!r}: AGP end_epoch {config['end_epoch']} is before start_epoch "
                                 f"{config.get('start_epoch', 0)}.")


def epoch_sparsity(config: Mapping[str, Any], epoch: int) -> float | None:
    """NNI 1.x's per-layer AGP target at ``epoch`` (``None`` before ``start_epoch``: no pruning yet).

    ``final + (initial - final) * (1 - (epoch - start) / span)^3`` with
    ``span = ((end - start - 1) // frequency) * frequency``; the final sparsity from ``end_epoch`` on.
    """
    final, initial = float(config["sparsity"]), float(config.get("initial_sparsity", 0.0))
    start, end = int(config.get("start_epoch", 0)), int(config.get("end_epoch", 1))
    frequency = int(config.get("frequency", 1))
    if epoch < start:
        return None
    span = ((end - start - 1) // frequency) * frequency
    if end <= start or initial >= final or epoch >= end or span <= 0:
        return final
    return final + (initial - final) * (1.0 - (epoch - start) / span) ** 3


class AGPEngine(Pruner):
    """Gradual pruning: each layer's sparsity goes from ``initial_sparsity`` to its config ``sparsity``.

    Pruning iteration ``t`` is ``steps // frequency`` (``schedule="step"``: counted by the patched
    ``optimizer.step()`` or :meth:`step`) or ``epoch // frequency`` (``schedule="epoch"``: set by
    :meth:`update_epoch`). At iteration ``t`` a layer's target is
    ``final + (initial - final) * (1 - t / num_iterations)^3``; masks are recomputed whenever ``t`` changes
    and never shrink (already pruned units stay pruned). ``pruning_algorithm`` picks the masker:
    ``level`` (unstructured), ``l1``/``l2``/``fpgm`` (filters).

    NNI 1.x's per-entry keys (Auptimizer's experiment files) are read too: ``final_sparsity`` (= ``sparsity``),
    ``initial_sparsity``, ``start_epoch``, ``end_epoch`` and ``frequency`` (in epochs). A layer whose entry has
    ``start_epoch`` or ``end_epoch`` follows :func:`epoch_sparsity`, updated by :meth:`update_epoch`.
    """

    user_name = "AGPPruner"  # NNI 1.x's name for it (slimkit.faces.nni.v1)
    iterative = True
    extra_config_keys = EPOCH_KEYS

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
            check_positive_int("AGPPruner", label, value)
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
        super().__init__(model, _epoch_entries(config_list), optimizer, dummy_input)
        self.set_wrappers_attribute("pruned_at_iteration", -1)
        self.masker = engine.masker_class(model, self)

    def _select_layers(self) -> list[tuple[str, nn.Module, dict[str, Any]]]:
        layers = super()._select_layers()
        for name, _, config in layers:
            _check_epoch_keys(name, config)
            initial = self.initial_sparsity
            if any(k in config for k in ("start_epoch", "end_epoch")):
                initial = config.setdefault("initial_sparsity", self.initial_sparsity)
            if config["sparsity"] < initial:
                raise PruningConfigError(f"Layer {name!r}: final sparsity {config['sparsity']} is below "
                                         f"initial_sparsity {initial}; AGP only increases sparsity.")
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
        if any(k in wrapper.config for k in ("start_epoch", "end_epoch")):
            return self._calc_epoch_mask(wrapper, wrapper_idx)
        t = self.current_iteration
        if wrapper.pruned_at_iteration == t:
            return None
        wrapper.pruned_at_iteration = t
        wrapper.if_calculated = True
        return self.masker.calc_mask(self.target_sparsity(wrapper, t), wrapper, wrapper_idx)

    def _calc_epoch_mask(self, wrapper: PrunerModuleWrapper, wrapper_idx: int | None) -> MaskDict | None:
        """NNI 1.x's epoch schedule: masks move at ``start_epoch`` and every ``frequency`` epochs after it."""
        config = wrapper.config
        start, frequency = int(config.get("start_epoch", 0)), int(config.get("frequency", 1))
        target = epoch_sparsity(config, self.epoch)
        if target is None:
            return None
        slot = min((self.epoch - start) // frequency, max(0, int(config.get("end_epoch", 1)) - start))
        if wrapper.pruned_at_iteration == slot:
            return None
        wrapper.pruned_at_iteration = slot
        wrapper.if_calculated = True
        return self.masker.calc_mask(target, wrapper, wrapper_idx)

    def step(self) -> None:
        """Advance one training step by hand (what the patched ``optimizer.step()`` does)."""
        self._on_optimizer_step()

    def update_epoch(self, epoch: int) -> None:
        """Start ``epoch``; with ``schedule="epoch"`` masks move to that epoch's target right away."""
        self.epoch = int(epoch)
        if self.schedule == "epoch" or any(any(k in w.config for k in ("start_epoch", "end_epoch"))
                                           for w in self.modules_wrapper):
            self.update_mask()
            if self.optimizer is not None:
                for wrapper in self.modules_wrapper:
                    wrapper.apply_masks_to_module()
