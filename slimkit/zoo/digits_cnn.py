"""``digits_cnn``: a ~160k-parameter Conv-BN-ReLU network for sklearn's 8x8 handwritten digits.

Trained on the fly with a fixed seed and split (a few seconds on 2 cores), then cached as safetensors +
JSON under the slimkit cache, so later loads take milliseconds and return identical weights.
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from slimkit.core.io import atomic_directory
from slimkit.utils import model_device
from slimkit.zoo._common import require, seeded, zoo_cache_path
from slimkit.zoo.registry import ZooModel

TASK = "image_classification"
#: The offline dataset this model naturally trains / calibrates on (`slimkit.data` id).
DATA = "Digits"
ARCH_DEFAULTS: dict = {}
INPUT_DEFAULTS = {"batch_size": 64}

# Changing the recipe changes the weights: bump "version" so stale caches are not reused.
RECIPE: dict[str, Any] = {"version": 1, "seed": 0, "epochs": 8, "batch_size": 64, "lr": 5e-3, "weight_decay": 1e-4}
_CACHE_NAME = f"digits_cnn-v{RECIPE['version']}"
_NEEDS = "zoo model 'digits_cnn'"


class DigitsCNN(nn.Module):
    """Three Conv->BN->ReLU stages (two with 2x2 max-pooling) and a two-layer classifier.

    ``features`` holds the conv stages (indices 0-10), ``classifier`` the Flatten/Linear/ReLU/Linear head.
    """

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1, bias=False),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),  # 8x8 -> 4x4
            nn.Conv2d(32, 64, 3, padding=1, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(2),  # 4x4 -> 2x2
            nn.Conv2d(64, 128, 3, padding=1, bias=False),
            nn.BatchNorm2d(128),
            nn.ReLU(),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(128 * 2 * 2, 128), nn.ReLU(), nn.Linear(128, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map digit images ``[N, 1, 8, 8]`` scaled to [0, 1] to logits ``[N, 10]``."""
        return self.classifier(self.features(x))


@functools.lru_cache(maxsize=1)
def _split_arrays() -> tuple[np.ndarray, ...]:
    datasets = require("sklearn.datasets", "pip install scikit-learn", _NEEDS)
    selection = require("sklearn.model_selection", "pip install scikit-learn", _NEEDS)
    digits = datasets.load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = selection.train_test_split(x, y, test_size=0.25, random_state=0)
    return x_train, y_train, x_test, y_test


def digits_split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fixed digits split every slimkit component uses: ``(x_train, y_train, x_test, y_test)``.

    Images are float32 ``[N, 1, 8, 8]`` in [0, 1]; labels int64. 1,347 train / 450 test
    (sklearn ``train_test_split(test_size=0.25, random_state=0)``). Fresh tensors on every call.
    """
    return tuple(torch.from_numpy(a.copy()) for a in _split_arrays())  # type: ignore[return-value]


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 512) -> float:
    """Top-1 accuracy of ``model`` on ``(x, y)`` in eval mode, without gradients, on the model's device."""
    model.eval()
    device = model_device(model)
    with torch.no_grad():
        preds = torch.cat([model(x[i : i + batch_size].to(device)).argmax(1).cpu()
                           for i in range(0, len(x), batch_size)])
    return float((preds == y.cpu()).float().mean())


def train() -> tuple[nn.Module, dict[str, Any]]:
    """Train a fresh DigitsCNN with the fixed RECIPE; return it (eval mode) and its metrics.

    Runs on one thread: the result then does not depend on the machine's core count, and on a shared
    2-core box one thread is several times faster than two fighting for cores.
    """
    x_train, y_train, x_test, y_test = digits_split()
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = _fit(x_train, y_train)
    finally:
        torch.set_num_threads(threads)
    meta = {
        "test_accuracy": accuracy(model, x_test, y_test),
        "train_accuracy": accuracy(model, x_train, y_train),
        "train_seconds": round(time.perf_counter() - start, 3),
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "recipe": dict(RECIPE),
        "split": "sklearn load_digits, train_test_split(test_size=0.25, random_state=0)",
    }
    return model.eval(), meta


def _fit(x_train: torch.Tensor, y_train: torch.Tensor) -> nn.Module:
    with seeded(RECIPE["seed"]):
        model = DigitsCNN()
        opt = torch.optim.AdamW(model.parameters(), lr=RECIPE["lr"], weight_decay=RECIPE["weight_decay"])
        steps_per_epoch = -(-len(x_train) // RECIPE["batch_size"])
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=RECIPE["lr"], total_steps=RECIPE["epochs"] * steps_per_epoch
        )
        model.train()
        for _ in range(RECIPE["epochs"]):
            order = torch.randperm(len(x_train))
            for i in range(0, len(x_train), RECIPE["batch_size"]):
                idx = order[i : i + RECIPE["batch_size"]]
                loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
    return model


def _read_cache() -> tuple[nn.Module, dict[str, Any]] | None:
    """Return the cached model and meta, or None when the cache is absent or unreadable."""
    folder = zoo_cache_path(_CACHE_NAME)
    if not folder.is_dir():
        return None
    try:
        from safetensors.torch import load_file

        meta = json.loads((folder / "meta.json").read_text())
        model = DigitsCNN()
        model.load_state_dict(load_file(folder / "model.safetensors"), strict=True)
        return model, meta
    except Exception:  # corrupt or foreign cache: retrain and replace it
        return None


def _write_cache(model: nn.Module, meta: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    folder = zoo_cache_path(_CACHE_NAME)
    with atomic_directory(folder, replace=folder.exists()) as tmp:
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, tmp / "model.safetensors")
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True))


def build() -> nn.Module:
    """Build an untrained DigitsCNN (random init; no training, no cache access)."""
    return DigitsCNN()


def load(batch_size: int) -> ZooModel:
    """Return the trained DigitsCNN (from the cache, training it first if needed) and test images as input."""
    cached = _read_cache()
    hit = cached is not None
    if cached is None:
        cached = train()
        _write_cache(*cached)
    model, meta = cached
    meta = {**meta, "cache_hit": hit, "cache_path": str(zoo_cache_path(_CACHE_NAME))}
    x_test = digits_split()[2]
    return ZooModel(model, x_test[:batch_size].clone(), "digits_cnn", meta=meta)
