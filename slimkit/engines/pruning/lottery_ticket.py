"""Lottery ticket pruning (Frankle & Carbin, 2019): iterative magnitude pruning with weight rewinding.

Round 0 trains the dense model. Each later round ``k`` (of ``prune_iterations``) prunes the smallest trained
weights so that the layer's sparsity is ``1 - (1 - s)^(k / prune_iterations)`` (each round removes the same
share of what is left; pruned weights stay pruned), then rewinds the surviving weights to their values at
the start of training (or after ``rewind_step`` optimizer steps: "late rewinding", Frankle et al., 2020) and
resets the optimizer and learning-rate scheduler, and the user trains again. The last round trains the
final ticket. ``base_algo="level"`` (the paper) prunes single weights; ``l1``/``l2``/``fpgm`` prune whole
filters, which ``ModelSpeedup`` removes for real.

Use::

    pruner = LotteryTicketPruner(model, [{"prune_iterations": 5, "sparsity": 0.8, "op_types": ["default"]}],
                                 optimizer, lr_scheduler=scheduler)
    pruner.compress()
    for _ in pruner.get_prune_iterations():
        pruner.prune_iteration_start()
        for epoch in range(epochs):
            train(model, optimizer)        # the patched optimizer.step() keeps pruned weights at zero
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.engines.pruning.allocation import use_base_algo
from slimkit.engines.pruning.compressor import Pruner
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.maskers import MaskDict
from slimkit.engines.pruning.training import check_positive_int
from slimkit.engines.pruning.wrapper import PrunerModuleWrapper


class LotteryTicketEngine(Pruner):
    """Iterative magnitude pruning with rewinding to the initial (or early) weights between rounds.

    ``LotteryTicketPruner(model, config_list, optimizer=None, lr_scheduler=None, reset_weights=True,
    base_algo="level", rewind_step=0)``. Every ``config_list`` entry carries ``sparsity`` (the final one) and
    ``prune_iterations`` (the same in all entries, default 5). ``reset_weights=False`` keeps the trained
    weights between rounds (iterative pruning without rewinding). Needs ``optimizer`` (its ``step`` is patched
    to keep pruned weights at zero and to count steps for ``rewind_step``).
    """

    user_name = "LotteryTicketPruner"  # NNI 1.x's name for it (slimkit.faces.nni.v1)
    extra_config_keys = ("prune_iterations",)

    def __init__(
        self,
        model: nn.Module,
        config_list: Sequence[Mapping[str, Any]],
        optimizer: torch.optim.Optimizer | None = None,
        lr_scheduler: Any = None,
        reset_weights: bool = True,
        base_algo: str = "level",
        rewind_step: int = 0,
        dummy_input: Any = None,
    ) -> None:
        who = self.display_name()
        if optimizer is None:
            raise PruningConfigError(f"{who} trains between rounds: pass the optimizer you train with "
                                     "(LotteryTicketPruner(model, config_list, optimizer)).")
        if not isinstance(reset_weights, bool):
            raise PruningConfigError(f"{who} reset_weights must be True or False, got {reset_weights!r}.")
        if lr_scheduler is not None and not callable(getattr(lr_scheduler, "state_dict", None)):
            raise PruningConfigError(f"{who} lr_scheduler must be a torch lr scheduler, got {lr_scheduler!r}.")
        use_base_algo(self, model, base_algo)
        self.rewind_step = check_positive_int(who, "rewind_step", rewind_step, minimum=0)
        self.lr_scheduler, self.reset_weights = lr_scheduler, reset_weights
        self.curr_prune_iteration: int | None = None
        super().__init__(model, config_list, optimizer, dummy_input)
        self._optimizer_state = copy.deepcopy(optimizer.state_dict())
        self._scheduler_state = None if lr_scheduler is None else copy.deepcopy(lr_scheduler.state_dict())
        self._rewind_state = self.weights_snapshot() if self.rewind_step == 0 else None

    def _select_layers(self) -> list[tuple[str, nn.Module, dict[str, Any]]]:
        layers = super()._select_layers()
        rounds = {config.get("prune_iterations", 5) for _, _, config in layers}
        if len(rounds) > 1:
            raise PruningConfigError(f"LotteryTicketPruner: every config_list entry must use the same "
                                     f"prune_iterations, got {sorted(map(str, rounds))}.")
        self.prune_iterations = check_positive_int("LotteryTicketPruner", "prune_iterations",
                                                   rounds.pop() if rounds else 5)
        return layers

    def get_prune_iterations(self) -> range:
        """Rounds to run: 0 (dense training) then 1..prune_iterations, each after pruning and rewinding."""
        return range(self.prune_iterations + 1)

    def round_sparsity(self, wrapper: PrunerModuleWrapper, k: int) -> float:
        """The layer's sparsity during round ``k``."""
        return 1.0 - (1.0 - float(wrapper.config["sparsity"])) ** (k / self.prune_iterations)

    def calc_mask(self, wrapper: PrunerModuleWrapper, wrapper_idx: int | None = None) -> MaskDict | None:
        """Masks of the current round (computed by :meth:`prune_iteration_start`, never by ``compress``)."""
        k = self.curr_prune_iteration
        if not k:
            return None
        return self.masker.calc_mask(self.round_sparsity(wrapper, k), wrapper, wrapper_idx)

    def prune_iteration_start(self) -> None:
        """Begin the next round: prune further (after round 0), rewind the weights, reset optimizer and scheduler."""
        k = 0 if self.curr_prune_iteration is None else self.curr_prune_iteration + 1
        if k > self.prune_iterations:
            raise PruningConfigError(f"LotteryTicketPruner: all {self.prune_iterations} pruning rounds have run; "
                                     "loop over get_prune_iterations() once.")
        self.curr_prune_iteration = k
        if k == 0:
            return
        if self._rewind_state is None:
            raise PruningConfigError(f"LotteryTicketPruner: rewind_step={self.rewind_step} but only "
                                     f"{self.step_count} optimizer steps ran before pruning; train at least that "
                                     "long in round 0 or lower rewind_step.")
        self.update_mask()
        for wrapper in self.modules_wrapper:
            wrapper.if_calculated = True
        if self.reset_weights:
            self.restore_weights(self._rewind_state)
            self.optimizer.load_state_dict(self._optimizer_state)
            if self.lr_scheduler is not None:
                self.lr_scheduler.load_state_dict(self._scheduler_state)
        for wrapper in self.modules_wrapper:
            wrapper.apply_masks_to_module()

    def _on_optimizer_step(self) -> None:
        super()._on_optimizer_step()
        if self._rewind_state is None and self.step_count == self.rewind_step:
            self._rewind_state = self.weights_snapshot()

    def compress(self) -> nn.Module:
        """Return the wrapped model; pruning happens in :meth:`prune_iteration_start`."""
        return self.bound_model
