"""Taylor first-order filter pruning (Molchanov et al., 2019): rank filters by ``(sum of weight * grad)^2``.

The gradients come from a few batches of ``dataloader`` with ``criterion`` (or the model's ``.loss``), from the
user's ``trainer``, or from the user's own training steps after ``compress()`` (see
:mod:`~slimkit.engines.pruning.data_driven`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.data_driven import _DataDrivenPruner
from slimkit.engines.pruning.maskers import StructuredWeightMasker
from slimkit.engines.pruning.wrapper import PrunerModuleWrapper
from slimkit.engines.speedup.layers import out_dim, out_major
from slimkit.errors import DataError
from slimkit.evaluation.runtime import eval_mode
from slimkit.utils import main_tensor, run_model


class TaylorFOWeightFilterPrunerMasker(StructuredWeightMasker):
    """Filter importance = mean over batches of ``(sum over the filter of weight * grad)^2`` (Molchanov 2019)."""

    def get_channel_importance(self, wrapper: PrunerModuleWrapper, wrapper_idx: int | None) -> torch.Tensor:
        """The Taylor contribution the pruner accumulated for this layer."""
        if wrapper.contribution is None or wrapper.contribution_batches == 0:
            raise DataError(f"No gradient statistics for layer {wrapper.name!r}; did its forward run on the data?")
        return wrapper.contribution / wrapper.contribution_batches


class TaylorFOWeightFilterPruner(_DataDrivenPruner):
    """Prune filters whose removal changes the loss least, by a first-order Taylor estimate.

    With ``dataloader`` the loss is ``criterion(main output, targets)`` (or ``output.loss`` for Hugging Face
    models fed a mapping with labels); gradients are computed in eval mode without changing weights, and
    existing ``.grad`` values are restored afterwards.
    """

    masker_class = TaylorFOWeightFilterPrunerMasker

    def _setup(self) -> None:
        self.set_wrappers_attribute("contribution", None)
        self.set_wrappers_attribute("contribution_batches", 0)
        self._collecting = False
        self._seen = 0

    def _accumulate(self) -> None:
        for wrapper in self.modules_wrapper:
            grad = wrapper.module.weight.grad
            if grad is None:
                continue
            weight = wrapper.module.weight.detach() * wrapper.weight_mask
            score = out_major(wrapper.module, (weight * grad).float()).reshape(grad.shape[out_dim(wrapper.module)],
                                                                               -1).sum(dim=1).pow(2)
            wrapper.contribution = score if wrapper.contribution is None else wrapper.contribution + score
            wrapper.contribution_batches += 1

    def _start_collecting(self) -> None:
        self._collecting, self._seen = True, 0

    def _stop_collecting(self) -> None:
        self._collecting = False

    def _before_optimizer_step(self) -> None:
        if self._collecting and self._seen < self.statistics_batch_num:
            self._accumulate()
            self._seen += 1

    def _loss(self, output: Any, targets: Any) -> torch.Tensor:
        if self.criterion is not None:
            if targets is None:
                raise DataError("TaylorFOWeightFilterPruner: criterion given but the batches carry no targets.")
            return self.criterion(main_tensor(output), targets)
        loss = getattr(output, "loss", None) if not isinstance(output, Mapping) else output.get("loss")
        if not isinstance(loss, torch.Tensor):
            raise PruningConfigError(
                "TaylorFOWeightFilterPruner needs criterion=loss_fn(output, targets) unless the model returns "
                "a .loss (Hugging Face models fed labels)."
            )
        return loss

    def _collect_statistics(self) -> None:
        if self.dataloader is None:  # the user's trainer: its optimizer steps accumulate (see _before_optimizer_step)
            return super()._collect_statistics()
        model = self.bound_model
        params = list(model.parameters())
        saved = [p.grad for p in params]
        try:
            with eval_mode(model):
                for inputs, targets in self._batches():
                    for p in params:
                        p.grad = None
                    with torch.enable_grad():
                        self._loss(run_model(model, inputs), targets).backward()
                    self._accumulate()
        finally:
            for p, g in zip(params, saved, strict=True):
                p.grad = g
