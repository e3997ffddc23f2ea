"""Pruna's ``CMMD`` and ``DinoScore`` classes: metrics whose networks Pruna downloads from a model hub.

slimkit works offline and has neither network, so both refuse with a message saying what to use instead (the
CLIP score and FID run from local weights through :class:`TorchMetricWrapper`).
"""

from __future__ import annotations

from typing import Any

import torch

from slimkit.faces.pruna.evaluation.metrics.metric_base import StatefulMetric
from slimkit.faces.pruna.evaluation.metrics.metric_torch import require_local_weights


class CMMD(StatefulMetric):
    """Pruna's CLIP maximum mean discrepancy; refused offline (see the module doc)."""

    metric_name = "cmmd"

    def __init__(self, device: str | torch.device | None = None, model_path: str | None = None, **kwargs: Any) -> None:
        require_local_weights(self.metric_name, model_path)


class DinoScore(StatefulMetric):
    """Pruna's DINO feature similarity; refused offline (see the module doc)."""

    metric_name = "dino_score"

    def __init__(self, device: str | torch.device | None = None, model_path: str | None = None, **kwargs: Any) -> None:
        require_local_weights(self.metric_name, model_path)
