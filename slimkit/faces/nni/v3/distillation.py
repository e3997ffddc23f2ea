"""NNI 3.0's layer-wise distillers over slimkit's distillation pieces (recorders, losses, connectors).

``DynamicLayerwiseDistiller(model, config_list, evaluator, teacher_model, teacher_predict,
origin_loss_lambda=1.0)``: each selected student layer's output is compared with the output of its ``link`` ed
teacher layers (``"auto"``: the layer of the same name) by ``apply_method`` (``"mse"``: :class:`MSELoss`,
``"kl"``: :class:`KLDivergence` at temperature 2), and the smallest of those losses, times the entry's
``lambda``, is added to ``origin_loss_lambda *`` the user's loss. ``Adaptive1dLayerwiseDistiller`` (one link per
layer) puts a trained :class:`LinearConnector` on the student's last dimension where it differs from the
teacher's (built from the shapes :meth:`~_LayerwiseDistiller.track_forward` sees). The loss is patched into the
evaluator's training (:meth:`Evaluator.patch_loss`); ``teacher_predict(batch, teacher_model)`` runs the teacher
(in eval mode, without gradients) on each batch. ``compress(max_steps, max_epochs)`` trains; ``from_compressor``
chains a distiller after pruners and quantizers (:mod:`slimkit.faces.nni.v3.chain`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from slimkit.errors import ConfigError, check_number, closest
from slimkit.faces.nni.v3.chain import V3Compressor
from slimkit.faces.nni.v3.config import SELECT_KEYS, check_entry, select_modules
from slimkit.faces.nni.v3.evaluator import Evaluator
from slimkit.training.distill.connectors import LinearConnector
from slimkit.training.distill.losses import KLDivergence, MSELoss
from slimkit.training.distill.objective import frozen_teacher
from slimkit.training.distill.recorders import ModuleOutputsRecorder

__all__ = ["Adaptive1dLayerwiseDistiller", "DISTILL_V3_KEYS", "DynamicLayerwiseDistiller"]

#: every key an NNI 3.0 distillation entry may carry here
DISTILL_V3_KEYS = (*SELECT_KEYS, "target_names", "lambda", "link", "apply_method")
_METHODS = ("mse", "kl")
_DEFAULT_TYPES = ("Conv1d", "Conv2d", "Conv3d", "Linear")


@dataclass
class _Target:
    """One student layer's distillation: its weight, teacher layers and loss."""

    lambda_: float
    links: list[str]
    method: str
    connector: nn.Module | None = None
    student: ModuleOutputsRecorder | None = None
    teachers: list[ModuleOutputsRecorder] = field(default_factory=list)


class _LayerwiseDistiller(V3Compressor):
    """What both NNI 3.0 layer-wise distillers share (config, recording, the loss patch)."""

    single_link = False

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]], evaluator: Evaluator,
                 teacher_model: nn.Module, teacher_predict: Callable[[Any, nn.Module], Any],
                 origin_loss_lambda: float = 1.0, existed_wrappers: Any = None) -> None:
        who = type(self).__name__
        if not isinstance(model, nn.Module) or not isinstance(teacher_model, nn.Module):
            raise ConfigError(f"{who} needs the student model and teacher_model as torch.nn.Modules, got "
                              f"{type(model).__name__} and {type(teacher_model).__name__}.")
        if not isinstance(evaluator, Evaluator):
            raise ConfigError(f"{who} needs an NNI 3.0 evaluator (TorchEvaluator, TransformersEvaluator) whose loss "
                              f"it extends, got {type(evaluator).__name__}.")
        if not callable(teacher_predict):
            raise ConfigError(f"{who} teacher_predict must be a function (batch, teacher_model) -> output, got "
                              f"{type(teacher_predict).__name__}.")
        check_number(f"{who} origin_loss_lambda", origin_loss_lambda, 0)
        if existed_wrappers is not None:
            raise ConfigError(f"{who}(existed_wrappers=...) is NNI's internal argument; chain with "
                              f"{who}.from_compressor(compressor, config_list, teacher_model, teacher_predict).")
        self.bound_model, self.evaluator, self.teacher_model = model, evaluator, teacher_model
        self.teacher_predict, self.origin_loss_lambda = teacher_predict, float(origin_loss_lambda)
        self.targets = self._targets(model, teacher_model, config_list)

    def _targets(self, model: nn.Module, teacher: nn.Module, config_list: Any) -> dict[str, _Target]:
        who = type(self).__name__
        if isinstance(config_list, (str, bytes, Mapping)) or not isinstance(config_list, Sequence) or not config_list:
            raise ConfigError(f"{who} config_list must be a non-empty list of dicts, e.g. [{{'op_types': ['Conv2d'], "
                              "'lambda': 0.1, 'apply_method': 'mse'}].")
        teacher_names = [n for n, _ in teacher.named_modules() if n]
        out: dict[str, _Target] = {}
        for index, entry in enumerate(config_list):
            where = f"config_list[{index}]"
            check_entry(entry, where, DISTILL_V3_KEYS, "distillation", ConfigError)
            if list(entry.get("target_names", ["_output_"])) != ["_output_"]:
                raise ConfigError(f"{where}['target_names'] must be ['_output_'] (slimkit distils layer outputs), "
                                  f"got {entry['target_names']!r}.")
            weight = entry.get("lambda", 1.0)
            check_number(f"{where}['lambda']", weight, 0)
            method = entry.get("apply_method", "mse")
            if method not in _METHODS:
                raise ConfigError(f"{where}['apply_method'] must be 'mse' (hidden states) or 'kl' (logits), got "
                                  f"{method!r}.")
            for name in select_modules(model, entry, _DEFAULT_TYPES, where):
                links = self._links(entry.get("link", "auto"), name, teacher_names, where)
                out[name] = _Target(float(weight), links, method)
        if not out:
            raise ConfigError(f"{who}: no entry of config_list selects a layer of the student model.")
        return out

    def _links(self, link: Any, name: str, teacher_names: Sequence[str], where: str) -> list[str]:
        links = [name] if link == "auto" else [link] if isinstance(link, str) else link
        if not isinstance(links, list) or not links or not all(isinstance(n, str) for n in links):
            raise ConfigError(f"{where}['link'] must be 'auto', a teacher layer name or a list of them, got {link!r}.")
        if self.single_link and len(links) != 1:
            raise ConfigError(f"{where}['link']: {type(self).__name__} links each student layer to one teacher "
                              f"layer, got {links!r}.")
        for teacher_name in links:
            if teacher_name not in teacher_names:
                raise ConfigError(f"{where}: the teacher has no layer {teacher_name!r} (linked to {name!r})."
                                  f"{closest(teacher_name, teacher_names)}")
        return links

    # --- recording --------------------------------------------------------------------------------------
    def _attach(self) -> None:
        for name, target in self.targets.items():
            target.student = ModuleOutputsRecorder(name)
            target.student.initialize(self.bound_model)
            target.teachers = [ModuleOutputsRecorder(link) for link in target.links]
            for recorder in target.teachers:
                recorder.initialize(self.teacher_model)
            for recorder in (target.student, *target.teachers):
                recorder.__enter__()

    def _detach(self) -> None:
        for target in self.targets.values():
            for recorder in (target.student, *target.teachers):
                if recorder is not None and recorder._active:
                    recorder.__exit__(None, None, None)

    def _loss(self, student: torch.Tensor, teacher: torch.Tensor, target: _Target) -> torch.Tensor:
        if target.connector is not None:
            student = target.connector(student)
        teacher = teacher.to(student.device)
        if student.shape != teacher.shape:
            raise ConfigError(f"{type(self).__name__}: a student output of shape {tuple(student.shape)} is compared "
                              f"with a teacher output of shape {tuple(teacher.shape)}; link layers of the same "
                              "shape (or use Adaptive1dLayerwiseDistiller for a different last dimension).")
        loss = KLDivergence(tau=2.0) if target.method == "kl" else MSELoss()
        return target.lambda_ * loss(student, teacher)

    def compute_distill_loss(self) -> torch.Tensor:
        """Sum over student layers of the smallest ``lambda * loss`` against its linked teacher layers."""
        total = torch.zeros(())
        for target in self.targets.values():
            if target.student is None or not target.student.data:
                continue
            student = target.student.get_record_data(len(target.student.data) - 1)
            losses = [self._loss(student, t.get_record_data(len(t.data) - 1), target) for t in target.teachers
                      if t.data]
            if losses:
                total = total.to(losses[0].device) + min(losses, key=lambda value: float(value.detach()))
        for target in self.targets.values():
            for recorder in (target.student, *target.teachers):
                if recorder is not None:
                    recorder.data = []
        return total

    def _patched_loss(self, loss: torch.Tensor, batch: Any) -> torch.Tensor:
        with torch.no_grad(), frozen_teacher(self.teacher_model):
            self.teacher_predict(batch, self.teacher_model)
        return self.origin_loss_lambda * loss + self.compute_distill_loss()

    # --- the chain's training --------------------------------------------------------------------------
    def _fuse_preprocess(self, evaluator: Evaluator) -> None:
        """Record the student's and teacher's layers; add the distillation loss to the user's."""
        self._attach()
        evaluator.patch_loss(self._patched_loss)
        evaluator.add_params([p for t in self.targets.values() if t.connector is not None
                              for p in t.connector.parameters()])

    def _fuse_postprocess(self, evaluator: Evaluator) -> None:
        """Stop recording."""
        self._detach()

    def compress(self, max_steps: int | None = None, max_epochs: int | None = None) -> nn.Module:
        """Train ``max_steps`` steps (or ``max_epochs`` epochs) with the distillation loss; return the model."""
        self._run_chain(max_steps, max_epochs)
        return self.bound_model

    def track_forward(self, *args: Any, **kwargs: Any) -> None:
        """NNI 3.0's ``track_forward(real_input)``: one forward of the student and the teacher, without gradients."""
        with torch.no_grad(), frozen_teacher(self.teacher_model):
            self.bound_model(*args, **kwargs)
            self.teacher_model(*args, **kwargs)

    def wrap_teacher_model(self) -> None:
        """Nothing: slimkit records the teacher with hooks only while training."""

    def unwrap_teacher_model(self) -> None:
        """Remove the teacher's recording hooks (they are removed after :meth:`compress` already)."""
        self._detach()


class DynamicLayerwiseDistiller(_LayerwiseDistiller):
    """NNI 3.0's layer-wise distiller: each student layer learns from the closest of its linked teacher layers.

    ``DynamicLayerwiseDistiller(model, config_list, evaluator, teacher_model, teacher_predict,
    origin_loss_lambda=1.0)``; ``config_list`` entries select layers (``op_names``, ``op_types``, ...) and set
    ``lambda`` (1), ``link`` (``"auto"``) and ``apply_method`` (``"mse"`` or ``"kl"``).
    """


class Adaptive1dLayerwiseDistiller(_LayerwiseDistiller):
    """NNI 3.0's distiller with a trained Linear between a student and a teacher layer of different widths.

    Same signature as :class:`DynamicLayerwiseDistiller`, one ``link`` per layer; call
    ``track_forward(real_input)`` first (or give the evaluator a ``dummy_input``) so the shapes are known.
    """

    single_link = True

    def track_forward(self, *args: Any, **kwargs: Any) -> None:
        """Run both models once and put a :class:`LinearConnector` where the last dimensions differ."""
        self._attach()
        try:
            super().track_forward(*args, **kwargs)
            for target in self.targets.values():
                student = target.student.get_record_data(0)  # type: ignore[union-attr]
                teacher = target.teachers[0].get_record_data(0)
                if student.shape[-1] != teacher.shape[-1] and target.connector is None:
                    target.connector = LinearConnector(student.shape[-1], teacher.shape[-1]).to(student.device)
            self._tracked = True
        finally:
            self._detach()

    def _fuse_preprocess(self, evaluator: Evaluator) -> None:
        if not getattr(self, "_tracked", False):
            dummy = evaluator.get_dummy_input()
            if dummy is None:
                raise ConfigError("Adaptive1dLayerwiseDistiller needs the layers' shapes: call "
                                  "distiller.track_forward(real_input) before compress(), or give the evaluator a "
                                  "dummy_input.")
            self.track_forward(*(dummy if isinstance(dummy, tuple) else (dummy,)))
        super()._fuse_preprocess(evaluator)
