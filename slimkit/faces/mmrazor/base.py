"""BaseAlgorithm: MMRazor's algorithm entry point, ``forward(inputs, data_samples, mode)``.

``mode="loss"`` returns a dict of named scalar tensors (what a training loop sums), ``"tensor"`` the raw
output of the architecture, ``"predict"`` the predicted class indices (argmax over the classes of the main
output: the last dimension, or dimension 1 of dense ``[N, C, H, W]`` logits). An architecture that is itself
a :class:`BaseAlgorithm` is called with the same mode; one with MMEngine's ``loss(inputs, data_samples)``
method (a detector, a segmentor) gives its own dict of losses; a plain ``nn.Module`` (a zoo model, a Hugging
Face model) gets slimkit's task loss: cross-entropy on ``data_samples`` (the targets; per pixel for
``[N, C, H, W]`` logits against ``[N, H, W]`` targets), or the model's own ``.loss`` when there are none.
``data_samples`` may be the targets or a dict holding them under ``"labels"`` (with more per-sample fields,
such as the ``"sample_idx"`` CRD needs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from slimkit.data.batches import split_batch
from slimkit.errors import ConfigError, DataError
from slimkit.faces.mmrazor.builder import build, build_module, register_module
from slimkit.faces.mmrazor.teacher import load_pretrained
from slimkit.training.losses import cross_entropy, model_loss
from slimkit.utils import main_tensor, run_model

#: the modes ``forward`` accepts
MODES: tuple[str, ...] = ("loss", "tensor", "predict")


@register_module()
class BaseAlgorithm(nn.Module):
    """Wraps an ``architecture`` (a module or a config dict built with :func:`~slimkit.faces.mmrazor.build`).

    ``data_preprocessor``: a module or callable applied to the inputs before every forward (a config dict is
    built). ``init_cfg``: MMEngine's ``dict(type='Pretrained', checkpoint=...)`` (see :meth:`init_weights`).
    Subclasses override :meth:`loss` (and, when needed, :meth:`tensor` / :meth:`predict`).
    """

    def __init__(self, architecture: nn.Module | Mapping[str, Any],
                 data_preprocessor: nn.Module | Callable[[Any], Any] | Mapping[str, Any] | None = None,
                 init_cfg: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        if init_cfg is not None and not isinstance(init_cfg, Mapping):
            raise ConfigError(f"init_cfg must be dict(type='Pretrained', checkpoint=...) or None, got {init_cfg!r}.")
        self.init_cfg = dict(init_cfg) if init_cfg else None
        self.architecture = build_module(architecture, "architecture")
        if isinstance(data_preprocessor, Mapping):
            data_preprocessor = build(data_preprocessor)
        if data_preprocessor is not None and not callable(data_preprocessor):
            raise ConfigError(f"data_preprocessor must be callable (inputs -> inputs), got "
                              f"{type(data_preprocessor).__name__}.")
        self.data_preprocessor = data_preprocessor
        if type(self) is BaseAlgorithm:
            self.init_weights()

    def init_weights(self) -> None:
        """Load ``init_cfg=dict(type='Pretrained', checkpoint=<.safetensors>, prefix='')`` into the algorithm.

        Subclasses call it at the end of their ``__init__``. Tensors load by name (``prefix`` removed from the
        checkpoint's names); names the algorithm lacks, or of another shape, raise ConfigError; the algorithm's
        tensors the checkpoint lacks keep their values and are logged. A URL or a pickle checkpoint (``.pth``)
        is not read (slimkit downloads nothing and reads no pickle): a logged note says so.
        """
        if self.init_cfg:
            load_pretrained(self, self.init_cfg)

    def forward(self, inputs: Any, data_samples: Any = None, mode: str = "tensor") -> Any:
        """Dispatch to :meth:`loss`, :meth:`tensor` or :meth:`predict` by ``mode``."""
        if mode not in MODES:
            raise ConfigError(f"Invalid mode {mode!r}; BaseAlgorithm.forward supports mode='loss', 'tensor' or "
                              "'predict'.")
        if self.data_preprocessor is not None:
            inputs = self.data_preprocessor(inputs)
        return getattr(self, mode)(inputs, data_samples)

    def _run(self, inputs: Any, data_samples: Any, mode: str) -> Any:
        if isinstance(self.architecture, BaseAlgorithm):
            return self.architecture(inputs, data_samples, mode=mode)
        return run_model(self.architecture, inputs)

    def student_loss(self, inputs: Any, data_samples: Any = None) -> tuple[dict[str, torch.Tensor], Any]:
        """(named losses of the architecture, its raw output -- None when the architecture computed them itself)."""
        arch = self.architecture
        if isinstance(arch, BaseAlgorithm):
            return arch(inputs, data_samples, mode="loss"), None
        if has_loss_method(arch):
            losses = arch.loss(inputs, data_samples)
            if not isinstance(losses, Mapping):
                raise ConfigError(f"{type(arch).__name__}.loss(inputs, data_samples) must return a dict of named "
                                  f"losses (MMEngine's convention), got {type(losses).__name__}.")
            return dict(losses), None
        output = run_model(arch, inputs)
        return {"loss": task_loss(output, data_samples)}, output

    def loss(self, inputs: Any, data_samples: Any = None) -> dict[str, torch.Tensor]:
        """Named scalar losses of the architecture on ``inputs`` against ``data_samples``."""
        return self.student_loss(inputs, data_samples)[0]

    def tensor(self, inputs: Any, data_samples: Any = None) -> Any:
        """The architecture's raw output."""
        return self._run(inputs, data_samples, "tensor")

    def predict(self, inputs: Any, data_samples: Any = None) -> torch.Tensor:
        """Predicted class indices: argmax over the last dimension of the main output."""
        if isinstance(self.architecture, BaseAlgorithm):
            return self.architecture(inputs, data_samples, mode="predict")
        logits = main_tensor(run_model(self.architecture, inputs))
        return logits.argmax(dim=1 if logits.dim() == 4 else -1)


def has_loss_method(model: Any) -> bool:
    """Whether ``model``'s class defines MMEngine's ``loss(inputs, data_samples)`` method."""
    return callable(getattr(type(model), "loss", None)) and not isinstance(model, BaseAlgorithm)


def labels_of(data_samples: Any) -> Any:
    """The targets in ``data_samples``: the value itself, or its ``"labels"`` / ``"gt_label"`` entry."""
    if isinstance(data_samples, Mapping):
        for key in ("labels", "gt_label", "gt_labels"):
            if key in data_samples:
                return data_samples[key]
        return None
    return data_samples


def task_loss(output: Any, targets: Any) -> torch.Tensor:
    """Cross-entropy of ``output``'s main tensor against integer ``targets``, else the output's own ``.loss``."""
    targets = labels_of(targets)
    if targets is not None:
        return cross_entropy(main_tensor(output), targets)
    loss = model_loss(output)
    if loss is None:
        raise DataError("mode='loss' needs data_samples (the integer targets) or an architecture whose output "
                        "carries a .loss (a Hugging Face model fed labels).")
    return loss


def batch_loss(algorithm: nn.Module, batch: Any) -> torch.Tensor:
    """A :func:`slimkit.training.fit` batch loss for an algorithm: the sum of ``algorithm(x, y, mode="loss")``."""
    inputs, targets = split_batch(batch)
    losses = algorithm(inputs, targets, mode="loss")
    if not isinstance(losses, Mapping) or not losses:
        raise ConfigError(f"mode='loss' must return a non-empty dict of scalar tensors, got {type(losses).__name__}.")
    return torch.stack([v.float() for v in losses.values()]).sum()
