"""Per-layer sparsity allocation: the base of the pruners that decide how much each layer loses.

NetAdapt, simulated annealing, AutoCompress, AMC and the sensitivity pruner all take one overall target
(``config_list`` ``sparsity``: the fraction of the selected layers' weights to prune) and search for the
per-layer sparsities that hurt the model least. They share this base: the selected layers are wrapped once,
an *allocation* ``{layer: sparsity}`` is turned into masks by a base masker (``base_algo``: ``l1``, ``l2`` or
``fpgm`` filters, which the speedup removes for real, or ``level`` single weights), candidates are scored by
the user's ``evaluator(model)`` on the masked model, and the best allocation's masks are installed.

Counting: a layer with ``u`` units (filters, or weights for ``level``) and sparsity ``s`` loses
``floor(s * u)`` units; the overall sparsity is the pruned share of all selected weights. Allocations are
kept on whole units, so the sparsity reported is the sparsity the masks have.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from slimkit.core.io import write_json_atomic
from slimkit.engines.pruning.compressor import Pruner
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.maskers import (
    FPGMPrunerMasker,
    L1FilterPrunerMasker,
    L2FilterPrunerMasker,
    LevelPrunerMasker,
    WeightMasker,
    num_to_prune,
)
from slimkit.engines.pruning.one_shot import FILTER_OP_TYPES, LEVEL_OP_TYPES
from slimkit.errors import check_number
from slimkit.evaluation.runtime import eval_mode

#: ``base_algo`` name -> the masker that ranks units inside one layer
BASE_MASKERS: dict[str, type[WeightMasker]] = {
    "l1": L1FilterPrunerMasker, "l2": L2FilterPrunerMasker, "fpgm": FPGMPrunerMasker, "level": LevelPrunerMasker,
}
#: a layer never loses more than this unless its config entry says ``max_sparsity_per_layer``
DEFAULT_MAX_LAYER_SPARSITY = 0.9
OPTIMIZE_MODES = ("maximize", "minimize")
Allocation = dict[str, float]
Evaluator = Callable[[nn.Module], float]


def use_base_algo(pruner: Pruner, model: nn.Module, base_algo: Any) -> None:
    """Give ``pruner`` the ``base_algo`` masker and its op types; an error listing them if it names none."""
    if base_algo not in BASE_MASKERS:
        raise PruningConfigError(f"{pruner.display_name()} base_algo must be one of {', '.join(BASE_MASKERS)} (filter "
                                 f"norms l1/l2, geometric median fpgm, single weights level), got {base_algo!r}.")
    pruner.base_algo = str(base_algo)
    pruner.default_op_types, pruner.supported_op_types = base_op_types(pruner.base_algo)
    pruner.masker = BASE_MASKERS[pruner.base_algo](model, pruner)


def base_op_types(base_algo: str) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """(what ``"default"`` means, the supported layer types) for a base masker."""
    if base_algo == "level":
        return LEVEL_OP_TYPES, None
    return ("Conv2d", "Linear"), FILTER_OP_TYPES


def check_evaluator(who: str, evaluator: Any) -> Evaluator:
    """The evaluator must be callable(model) -> number."""
    if not callable(evaluator):
        raise PruningConfigError(f"{who} needs evaluator=fn(model) -> metric (e.g. validation accuracy) to compare "
                                 f"candidate allocations, got {evaluator!r}.")
    return evaluator


class AllocationPruner(Pruner):
    """Base of the search-driven pruners: one overall target, per-layer sparsities found by a search.

    Subclasses call :meth:`_init_allocation` before ``Pruner.__init__`` and implement :meth:`search`, which
    returns the allocation to install. After :meth:`compress`: ``allocation`` (the chosen ``{layer: sparsity}``),
    ``history`` (every scored candidate) and ``best_score``. With ``experiment_data_dir`` the history is also
    written there as ``search_result.json``.
    """

    extra_config_keys = ("max_sparsity_per_layer",)

    def _init_allocation(self, model: nn.Module, base_algo: str, optimize_mode: str,
                         experiment_data_dir: str | os.PathLike | None) -> None:
        who = self.display_name()
        use_base_algo(self, model, base_algo)
        if optimize_mode not in OPTIMIZE_MODES:
            raise PruningConfigError(f"{who} optimize_mode must be 'maximize' (accuracy) or 'minimize' (loss), got "
                                     f"{optimize_mode!r}.")
        self.optimize_mode = optimize_mode
        self.experiment_data_dir = None if experiment_data_dir is None else Path(experiment_data_dir)
        self.allocation: Allocation | None = None
        self.history: list[dict[str, Any]] = []
        self.best_score: float | None = None

    def _select_layers(self) -> list[tuple[str, nn.Module, dict[str, Any]]]:
        layers = super()._select_layers()
        targets = sorted({config["sparsity"] for _, _, config in layers})
        if len(targets) > 1:
            raise PruningConfigError(
                f"{self.display_name()} takes one overall sparsity and decides each layer's share itself, but the "
                f"config_list gives {targets}; use one 'sparsity' for all selected layers (or 'exclude' layers)."
            )
        self.target_sparsity = targets[0] if targets else 0.0
        for name, _, config in layers:
            cap = config.get("max_sparsity_per_layer", DEFAULT_MAX_LAYER_SPARSITY)
            config["max_sparsity_per_layer"] = check_number(f"Layer {name!r}: max_sparsity_per_layer", cap, 0, 1,
                                                            open_low=True, open_high=True, error=PruningConfigError)
        return layers

    # --- counting ---------------------------------------------------------------------------------------------
    def units(self, name: str) -> int:
        """Prunable units of layer ``name``: output channels for filter maskers, weights for ``level``."""
        mask = self._wrapper(name).weight_mask
        return mask.numel() if self.base_algo == "level" else mask.shape[0]

    def _wrapper(self, name: str) -> Any:
        for wrapper in self.modules_wrapper:
            if wrapper.name == name:
                return wrapper
        raise KeyError(name)

    @property
    def layer_names(self) -> list[str]:
        """The selected layers, in model order."""
        return [w.name for w in self.modules_wrapper]

    def cap(self, name: str) -> float:
        """The largest sparsity layer ``name`` may get."""
        return float(self._wrapper(name).config["max_sparsity_per_layer"])

    def overall_sparsity(self, allocation: Mapping[str, float]) -> float:
        """The pruned share of all selected weights under ``allocation`` (counted as the masks will be)."""
        total = pruned = 0
        for wrapper in self.modules_wrapper:
            size, units = wrapper.weight_mask.numel(), self.units(wrapper.name)
            total += size
            pruned += size * num_to_prune(float(allocation.get(wrapper.name, 0.0)), units) / units
        return pruned / total if total else 0.0

    def snap(self, allocation: Mapping[str, float]) -> Allocation:
        """``allocation`` on whole units, each layer within ``[0, cap]``."""
        out = {}
        for name in self.layer_names:
            units = self.units(name)
            s = min(max(float(allocation.get(name, 0.0)), 0.0), self.cap(name))
            out[name] = num_to_prune(s, units) / units
        return out

    def scale_to_target(self, proportions: Mapping[str, float], target: float | None = None) -> Allocation:
        """Per-layer sparsities proportional to ``proportions`` (capped) whose overall sparsity reaches ``target``.

        Solves ``overall(min(a * p, cap)) = target`` for ``a`` by bisection (when the layers with a share are all
        capped below the target, the layers without one take the rest), rounds down to whole units, then adds
        single units where the rounding took most (largest remainder) until the target is reached.
        """
        target = self.target_sparsity if target is None else float(target)
        names = self.layer_names
        p = {n: max(float(proportions.get(n, 0.0)), 0.0) for n in names}
        if not any(p.values()):
            p = dict.fromkeys(names, 1.0)
        sizes = {n: self._wrapper(n).weight_mask.numel() for n in names}
        total = sum(sizes.values())

        def continuous(a: float) -> float:
            return sum(sizes[n] * min(a * p[n], self.cap(n)) for n in names) / total

        low, high = 0.0, 1.0
        while continuous(high) < target and high < 1e9:
            high *= 2.0
        if continuous(high) < target:  # the layers with a share are all capped: the others take the rest
            p = {n: max(v, 1e-9) for n, v in p.items()}
            while continuous(high) < target and high < 1e18:
                high *= 2.0
        for _ in range(60):
            mid = (low + high) / 2.0
            low, high = (mid, high) if continuous(mid) < target else (low, mid)
        wanted = {n: min(high * p[n], self.cap(n)) * self.units(n) for n in names}
        most = {n: num_to_prune(self.cap(n), self.units(n)) for n in names}
        counts = {n: min(math.floor(wanted[n] + 1e-9), most[n]) for n in names}
        while self.overall_sparsity(self._from_counts(counts)) + 1e-12 < target:
            room = [n for n in names if counts[n] < most[n]]
            if not room:
                break
            n = max(room, key=lambda n: (wanted[n] - counts[n], sizes[n] / self.units(n)))
            counts[n] += 1
        return self._from_counts(counts)

    def _from_counts(self, counts: Mapping[str, int]) -> Allocation:
        return {n: counts[n] / self.units(n) for n in self.layer_names}

    # --- masks, weights, scores ---------------------------------------------------------------------------------
    @torch.no_grad()
    def apply_allocation(self, allocation: Mapping[str, float]) -> None:
        """Compute every selected layer's masks from scratch at its sparsity in ``allocation``."""
        for idx, wrapper in enumerate(self.modules_wrapper):
            wrapper.weight_mask.fill_(1)
            if wrapper.bias_mask is not None:
                wrapper.bias_mask.fill_(1)
            masks = self.masker.calc_mask(float(allocation.get(wrapper.name, 0.0)), wrapper, idx)
            self._store_masks(wrapper, masks)
            wrapper.if_calculated = True

    @torch.no_grad()
    def commit(self, allocation: Mapping[str, float]) -> None:
        """Install ``allocation`` and zero the pruned weights, so later steps rank those units last."""
        self.apply_allocation(allocation)
        for wrapper in self.modules_wrapper:
            wrapper.apply_masks_to_module()

    def score(self, evaluator: Evaluator) -> float:
        """``evaluator(model)`` on the masked model in eval mode, signed so that higher is better."""
        model = self.bound_model
        with eval_mode(model), torch.no_grad():
            value = evaluator(model)
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
            raise PruningConfigError(f"{self.display_name()}: evaluator(model) must return a finite number (the "
                                     f"metric), got {value!r}.")
        return float(value) if self.optimize_mode == "maximize" else -float(value)

    def record(self, allocation: Mapping[str, float], score: float, **extra: Any) -> None:
        """Add one scored candidate to ``history`` (the metric as the evaluator returned it)."""
        metric = score if self.optimize_mode == "maximize" else -score
        self.history.append({"allocation": {k: round(v, 6) for k, v in allocation.items()},
                             "sparsity": round(self.overall_sparsity(allocation), 6), "metric": metric, **extra})

    # --- the search -------------------------------------------------------------------------------------------
    def search(self) -> Allocation:
        """Return the allocation to install (subclasses implement their search here)."""
        raise NotImplementedError(f"{self.display_name()} must implement search().")

    def check_reachable(self) -> None:
        """Refuse a target the per-layer caps cannot reach."""
        most = self.overall_sparsity({n: self.cap(n) for n in self.layer_names})
        if most + 1e-9 < self.target_sparsity:
            raise PruningConfigError(
                f"{self.display_name()}: overall sparsity {self.target_sparsity} cannot be reached: with every layer "
                f"at its max_sparsity_per_layer the selected layers lose {most:.3f} of their weights. Lower "
                "'sparsity', select more layers, or raise 'max_sparsity_per_layer'.")

    def update_mask(self) -> None:
        """Re-install the chosen allocation's masks (nothing before :meth:`compress` chose one)."""
        if self.allocation is not None:
            self.apply_allocation(self.allocation)

    def compress(self) -> nn.Module:
        """Search (once), install the best allocation's masks and return the wrapped model."""
        if self.allocation is None:
            allocation = self.snap(self.search())
            self.apply_allocation(allocation)
            self.allocation = allocation
            for wrapper in self.modules_wrapper:  # coupled layers are reconciled at their own sparsity
                wrapper.config["sparsity"] = allocation[wrapper.name]
            if self.experiment_data_dir is not None:
                write_json_atomic(self.experiment_data_dir / "search_result.json", {
                    "pruner": self.display_name(), "target_sparsity": self.target_sparsity,
                    "allocation": allocation, "sparsity": self.overall_sparsity(allocation),
                    "best_metric": None if self.best_score is None else (
                        self.best_score if self.optimize_mode == "maximize" else -self.best_score),
                    "history": self.history})
        return self.bound_model
