"""Top-k accuracy as MMEngine evaluators report it: ``{"accuracy/top1": percent, "accuracy/top5": percent}``.

``Accuracy`` is the ``val_evaluator`` of MMRazor's search configs (``dict(type='Accuracy', topk=(1, 5))``):
calling it with a model and labelled batches gives the metrics dict a search ranks candidates by
(``score_key='accuracy/top1'``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from slimkit.core.registry import register_component
from slimkit.data.batches import split_batch
from slimkit.errors import ConfigError, DataError
from slimkit.evaluation.runtime import eval_mode
from slimkit.utils import main_tensor, model_device, move_inputs, run_model


class Accuracy:
    """Top-k accuracy in percent over labelled batches, keyed ``"<prefix>/top<k>"``.

    ``topk``: an int or a tuple of ints, none larger than the number of classes. Labels of -100 are ignored.
    ``collect_device`` is accepted for MMEngine configs (slimkit evaluates in one process).
    """

    def __init__(self, topk: int | Sequence[int] = (1,), prefix: str = "accuracy", thrs: Any = None,
                 collect_device: str = "cpu") -> None:
        ks = (topk,) if isinstance(topk, int) else tuple(topk)
        if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
            raise ConfigError(f"Accuracy topk must be a positive int or a tuple of them, got {topk!r}.")
        if thrs is not None:
            raise ConfigError("Accuracy: thrs (score thresholds) is not supported.")
        self.topk, self.prefix = ks, str(prefix)

    def __call__(self, model: Any, dataloader: Iterable[Any]) -> dict[str, float]:
        """The metrics of ``model`` on ``dataloader`` (eval mode, no gradients)."""
        device = model_device(model)
        correct = dict.fromkeys(self.topk, 0)
        total = 0
        with torch.no_grad(), eval_mode(model):
            for batch in dataloader:
                inputs, labels = split_batch(batch)
                if labels is None:
                    raise DataError("Accuracy needs (inputs, labels) batches.")
                logits = main_tensor(run_model(model, move_inputs(inputs, device))).float()
                labels = torch.as_tensor(labels.get("labels") if isinstance(labels, dict) else labels).to(
                    logits.device).reshape(-1)
                logits = logits.reshape(-1, logits.shape[-1])
                if max(self.topk) > logits.shape[1] or len(labels) != len(logits):
                    raise DataError(f"Accuracy(topk={self.topk}) got logits {tuple(logits.shape)} for "
                                    f"{len(labels)} labels; k may not exceed the number of classes.")
                keep = labels != -100
                ranked = logits[keep].topk(max(self.topk), dim=1).indices
                hits = ranked == labels[keep][:, None]
                for k in self.topk:
                    correct[k] += int(hits[:, :k].any(dim=1).sum())
                total += int(keep.sum())
        if total == 0:
            raise DataError("Accuracy got no labelled samples; pass a non-empty labelled dataloader.")
        return {f"{self.prefix}/top{k}": 100.0 * correct[k] / total for k in self.topk}


register_component(Accuracy, "evaluator")
