"""Data-free distillation: a generator makes the images, the student learns the teachers' answers on them.

``DataFreeDistillation`` (ZSKT, Micaelli & Storkey 2019; DFAD) alternates a generator step, which *maximises*
what ``generator_distiller`` measures (its losses carry negative weights in MMRazor's configs), and
``student_iter`` student steps on fresh images with ``distiller``. ``DAFLDataFreeDistillation`` (Chen et al.
2019) trains both on one batch of images per step, the generator with DAFL's objectives on the teachers'
outputs. Both train with two optimizers (:meth:`DataFreeDistillation.train_step`), as MMRazor's do; build them
from the config's ``optim_wrapper`` with :func:`separate_optimizers`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from slimkit.errors import ConfigError, check_int
from slimkit.faces.mmrazor.base import BaseAlgorithm
from slimkit.faces.mmrazor.builder import build_module, register_module
from slimkit.faces.mmrazor.distill import build_distiller
from slimkit.faces.mmrazor.teacher import resolve_teacher
from slimkit.training.distill import ConfigurableDistiller
from slimkit.utils import run_model


def _teacher(name: str, spec: Any) -> nn.Module:
    if isinstance(spec, nn.Module):
        return spec
    if isinstance(spec, Mapping) and "build_cfg" in spec:
        module = build_module(spec["build_cfg"], f"teachers[{name!r}]")
        ckpt = spec.get("ckpt_path")
        if ckpt is not None and ("://" in str(ckpt) or not str(ckpt).endswith(".safetensors")
                                 and not os.path.isdir(str(ckpt))):
            raise ConfigError(f"teachers[{name!r}].ckpt_path={ckpt!r}: slimkit downloads nothing and reads no pickle; "
                              "pass the trained teacher itself (teachers=dict(name=module)) or a .safetensors file.")
        return resolve_teacher(module, ckpt) if ckpt is not None else module
    return build_module(spec, f"teachers[{name!r}]")


def _batch_size(data: Any) -> int:
    if isinstance(data, int) and not isinstance(data, bool) and data > 0:
        return data
    inputs = data[0] if isinstance(data, (tuple, list)) else data
    if isinstance(inputs, torch.Tensor) and inputs.dim() > 0:
        return int(inputs.shape[0])
    raise ConfigError(f"train_step takes a batch size (int > 0) or a batch whose inputs are a tensor, got "
                      f"{type(data).__name__}.")


@register_module()
class DataFreeDistillation(BaseAlgorithm):
    """Distil ``teachers`` into the student (``architecture``) on images a ``generator`` makes.

    ``teachers``: name -> a module, or MMRazor's ``dict(build_cfg=..., ckpt_path=...)`` (recorder sources are
    ``"<name>.<module path>"``); ``generator``: a module or config (``ZSKTGenerator``, ``DAFLGenerator``);
    ``distiller`` / ``generator_distiller``: the losses of the student and of the generator steps.
    ``student_iter`` student steps per generator step; ``student_train_first`` orders them. The teachers are
    frozen and stay in eval mode. ``mode="loss"`` gives the student's distillation losses on a fresh batch of
    generated images (as many as ``inputs`` holds); training needs :meth:`train_step` (two optimizers).
    """

    def __init__(self, architecture: nn.Module | Mapping[str, Any], teachers: Mapping[str, Any],
                 generator: nn.Module | Mapping[str, Any], distiller: ConfigurableDistiller | Mapping[str, Any],
                 generator_distiller: ConfigurableDistiller | Mapping[str, Any], student_iter: int = 1,
                 student_train_first: bool = False, data_preprocessor: Any = None,
                 init_cfg: Mapping[str, Any] | None = None) -> None:
        super().__init__(architecture, data_preprocessor, init_cfg)
        if not isinstance(teachers, Mapping) or not teachers:
            raise ConfigError(f"teachers must be a non-empty dict name -> teacher, got {teachers!r}.")
        self.teachers = nn.ModuleDict({str(k): _teacher(str(k), v) for k, v in teachers.items()})
        for p in self.teachers.parameters():
            p.requires_grad_(False)
        self.generator = build_module(generator, "generator")
        if not hasattr(self.generator, "latent_dim"):
            raise ConfigError(f"generator {type(self.generator).__name__} has no latent_dim; use ZSKTGenerator, "
                              "DAFLGenerator or a module with latent_dim that maps [N, latent_dim] noise to images.")
        self.distiller = build_distiller(distiller)
        self.generator_distiller = build_distiller(generator_distiller, "generator_distiller")
        for d in (self.distiller, self.generator_distiller):
            d.prepare(self.architecture, self.teachers)
        self.student_iter, self.student_train_first = check_int("student_iter", student_iter), bool(student_train_first)
        self.teachers.eval()
        self.init_weights()

    @property
    def student(self) -> nn.Module:
        """The student (the architecture)."""
        return self.architecture

    def train(self, mode: bool = True) -> DataFreeDistillation:
        """Set the student's and generator's mode; the teachers stay in eval mode."""
        super().train(mode)
        self.teachers.eval()
        return self

    def images(self, batch_size: int) -> torch.Tensor:
        """A batch of generated images (with gradients to the generator)."""
        return self.generator(None, batch_size)

    def distill(self, images: torch.Tensor, distiller: ConfigurableDistiller, through_teacher: bool) -> dict[
            str, torch.Tensor]:
        """``distiller``'s losses with the student and every teacher run on ``images``."""
        with distiller.student_recording() as recorders:
            recorders.feed(images, None, run_model(self.architecture, images), None)
        with distiller.teacher_recording() as recorders, torch.set_grad_enabled(through_teacher):
            for teacher in self.teachers.values():
                recorders.feed(images, None, run_model(teacher, images), None)
        return distiller.compute_distill_losses()

    def loss(self, inputs: Any, data_samples: Any = None) -> dict[str, torch.Tensor]:
        """The student's distillation losses on ``len(inputs)`` generated images (the generator is not trained)."""
        with torch.no_grad():
            images = self.images(_batch_size(inputs))
        return {f"distill.{k}": v for k, v in self.distill(images, self.distiller, False).items()}

    @staticmethod
    def _step(optimizer: Any, losses: Mapping[str, torch.Tensor], prefix: str) -> dict[str, float]:
        total = torch.stack([v.float() for v in losses.values()]).sum()
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
        return {f"{prefix}.{k}": float(v.detach()) for k, v in losses.items()}

    def train_generator(self, batch_size: int, optimizer: Any) -> dict[str, float]:
        """One generator step with ``generator_distiller`` (gradients flow through the frozen teachers)."""
        return self._step(optimizer, self.distill(self.images(batch_size), self.generator_distiller, True),
                          "generator")

    def train_student(self, batch_size: int, optimizer: Any) -> dict[str, float]:
        """``student_iter`` student steps, each on fresh (detached) images."""
        for _ in range(self.student_iter):
            with torch.no_grad():
                images = self.images(batch_size)
            logs = self._step(optimizer, self.distill(images, self.distiller, False), "distill")
        return logs

    def train_step(self, data: Any, optimizers: Mapping[str, Any]) -> dict[str, float]:
        """One training step; returns the named losses.

        ``data`` is a batch (its size is used) or a batch size; ``optimizers`` holds ``"architecture"`` (student
        and connectors) and ``"generator"``.
        """
        missing = [k for k in ("architecture", "generator") if k not in optimizers]
        if missing:
            raise ConfigError(f"train_step needs optimizers for {missing}; build them with "
                              "slimkit.razor.separate_optimizers(algorithm, cfg.optim_wrapper).")
        size = _batch_size(data)
        self.train()
        parts = [("generator", self.train_generator), ("architecture", self.train_student)]
        logs: dict[str, float] = {}
        for part, train in parts[::-1] if self.student_train_first else parts:
            logs.update(train(size, optimizers[part]))
        return logs


@register_module()
class DAFLDataFreeDistillation(DataFreeDistillation):
    """DAFL: one batch of generated images per step, for the generator and the student.

    The generator learns from ``generator_distiller`` (DAFL's objectives on the teachers' outputs), the student
    from ``distiller`` on the same images, detached.
    """

    def train_step(self, data: Any, optimizers: Mapping[str, Any]) -> dict[str, float]:
        """One DAFL step (see the class doc)."""
        size = _batch_size(data)
        self.train()
        images = self.images(size)
        logs = self._step(optimizers["generator"], self.distill(images, self.generator_distiller, True), "generator")
        distill = self.distill(images.detach(), self.distiller, False)
        return {**logs, **self._step(optimizers["architecture"], distill, "distill")}


def separate_optimizers(model: nn.Module, optim_wrapper: Mapping[str, Any]) -> dict[str, torch.optim.Optimizer]:
    """One torch optimizer per part, from MMRazor's ``SeparateOptimWrapperConstructor`` config.

    ``optim_wrapper``: ``dict(architecture=dict(optimizer=dict(type='SGD', lr=0.1, ...)), generator=dict(...))``
    (a ``constructor`` key is read and dropped). The ``architecture`` optimizer also trains the distillers'
    connectors. Optimizer types are names in ``torch.optim``.
    """
    out: dict[str, torch.optim.Optimizer] = {}
    for part, spec in optim_wrapper.items():
        if part in ("constructor", "_delete_", "type"):
            continue
        opt = dict(spec.get("optimizer", {})) if isinstance(spec, Mapping) else {}
        kind = opt.pop("type", None)
        cls = getattr(torch.optim, str(kind), None)
        if not isinstance(cls, type) or not issubclass(cls, torch.optim.Optimizer):
            raise ConfigError(f"optim_wrapper[{part!r}].optimizer type {kind!r} is not a torch.optim optimizer.")
        target = getattr(model, part, None)
        if not isinstance(target, nn.Module):
            raise ConfigError(f"optim_wrapper names {part!r}, which {type(model).__name__} does not have.")
        params = list(target.parameters())
        if part == "architecture":
            params += [p for name in ("distiller", "generator_distiller") if isinstance(getattr(model, name, None),
                                                                                       nn.Module)
                       for p in getattr(model, name).parameters()]
        out[part] = cls([p for p in params if p.requires_grad], **opt)
    return out
