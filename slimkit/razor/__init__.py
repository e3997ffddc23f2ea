"""The MMRazor-shaped face: ``BaseAlgorithm``, ``register_module()``, ``build(dict(type=...))``, configs.

>>> algo = build(dict(type="SingleTeacherDistill", architecture=student, teacher=teacher, distiller=dict(...)))
>>> losses = algo(x, y, mode="loss")   # {"student.loss": ..., "distill.loss_kl": ...}

The builder reads the one registry's component table (:mod:`slimkit.core.registry`): distillation losses,
recorders and connectors from :mod:`slimkit.training.distill`, ``ZooModel`` architectures, and the algorithms
here. Configs load from dicts, JSON or YAML with ``_base_`` inheritance (:func:`load_config`).
"""

from slimkit.razor.base import MODES, BaseAlgorithm, batch_loss, task_loss
from slimkit.razor.builder import build, build_module, register_module, zoo_model
from slimkit.razor.config import load_config, merge_configs
from slimkit.razor.distill import SingleTeacherDistill

__all__ = [
    "BaseAlgorithm",
    "MODES",
    "SingleTeacherDistill",
    "batch_loss",
    "build",
    "build_module",
    "load_config",
    "merge_configs",
    "register_module",
    "task_loss",
    "zoo_model",
]
