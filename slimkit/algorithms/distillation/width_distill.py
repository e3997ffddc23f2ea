"""width_distill: narrow a CNN by a width multiplier through the pruning engine, then distil the wide model into it."""

from __future__ import annotations

import copy
from typing import Any

from ConfigSpace import UniformFloatHyperparameter
from torch import nn

from slimkit.algorithms.recovery._training import (
    chosen_teacher,
    student_hyperparameters,
    teacher_hyperparameter,
    train_student,
)
from slimkit.core import registry
from slimkit.core.contract import SaveFn, SlimkitDistiller, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import ListHyperparameter
from slimkit.core.registry import register
from slimkit.errors import ConfigError
from slimkit.training.distill import ConfigurableDistiller, DistillObjective, KLDivergence, frozen_teacher

#: the pruner that chooses which channels the narrow student keeps (L1 norm of filters, with speedup)
PRUNER = "l1_filter"


class _PrunerView:
    """The config view the pruner reads: its hyperparameters from a dict, everything else from the SmashConfig."""

    def __init__(self, values: dict[str, Any], smash_config: SmashConfigPrefixWrapper) -> None:
        self._values, self._config = values, smash_config
        self.state: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._config, attr)


@register
class WidthDistill(SlimkitDistiller):
    """Width-multiplier distillation for CNNs: a student with ``width`` x the channels, taught by the full model.

    The student is the model with each prunable Conv/Linear layer narrowed to ``width`` of its output channels
    (filters of largest L1 norm kept, coupled layers together, channels physically removed by the pruning
    engine's speedup). It trains on the teacher's softened outputs (KL at ``temperature``, ``logits_weight``),
    attention transfer on every narrowed conv layer's output (``at_weight``; no connector needed) and the task
    loss (``task_weight``). ``teacher_ckpt`` names a saved model to learn from instead of the wide one (its conv
    layers must have the same names). The save records the kept channels and rebuilds the narrow model before loading.
    """

    algorithm_name = "width_distill"
    aliases = ("WidthDistill",)
    dataset_required = True
    save_fn = SaveFn.REPLAY
    references = {"Paper (FitNets/AT)": "https://arxiv.org/abs/1612.03928",
                  "Paper (KD)": "https://arxiv.org/abs/1503.02531"}

    def get_hyperparameters(self) -> list:
        """Width, layers left wide, loss weights, then the shared training settings."""
        return [
            UniformFloatHyperparameter("width", 0.05, 0.95, default_value=0.5,
                                       meta={"desc": "Width multiplier: the fraction of output channels each "
                                                     "narrowed layer keeps."}),
            ListHyperparameter("exclude", (), meta={"desc": "Layer names kept at full width."}),
            UniformFloatHyperparameter("logits_weight", 0.0, 100.0, default_value=1.0,
                                       meta={"desc": "Weight of the KL divergence to the wide model's outputs."}),
            UniformFloatHyperparameter("at_weight", 0.0, 1e4, default_value=100.0,
                                       meta={"desc": "Weight of attention transfer on the narrowed conv outputs."}),
            UniformFloatHyperparameter("temperature", 0.1, 100.0, default_value=4.0, log=True,
                                       meta={"desc": "Softmax temperature of the output distillation."}),
            UniformFloatHyperparameter("task_weight", 0.0, 100.0, default_value=1.0,
                                       meta={"desc": "Weight of the task loss on the data's targets."}),
            teacher_hyperparameter("the wide model (the model handed to it)"),
            *student_hyperparameters(epochs=3, lr=3e-3),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """Needs a Conv2d layer (a CNN)."""
        return isinstance(model, nn.Module) and any(isinstance(m, nn.Conv2d) for m in model.modules())

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return "It narrows the Conv2d layers of a CNN and the model has none."

    def _pruner_view(self, smash_config: SmashConfigPrefixWrapper) -> _PrunerView:
        values = registry.get(PRUNER).hyperparameter_defaults()
        values.update(sparsity=1.0 - float(smash_config["width"]), exclude=tuple(smash_config["exclude"]),
                      speedup=True)
        return _PrunerView(values, smash_config)

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        view = self._pruner_view(smash_config)
        student = registry.get(PRUNER)().apply(copy.deepcopy(model), view)
        teacher = chosen_teacher(smash_config, model)
        kept = view.state.get("kept_channels") or {}
        if not kept:
            raise ConfigError("width_distill: the pruning engine removed no channel; lower width_distill_width.")
        convs = [n for n in kept if isinstance(student.get_submodule(n), nn.Conv2d)]
        at, logits = float(smash_config["at_weight"]), float(smash_config["logits_weight"])
        distiller = None
        if at > 0 and convs:
            distiller = ConfigurableDistiller(
                student_recorders={f"s{i}": dict(type="ModuleOutputs", source=n) for i, n in enumerate(convs)},
                teacher_recorders={f"t{i}": dict(type="ModuleOutputs", source=n) for i, n in enumerate(convs)},
                distill_losses={f"at{i}": dict(type="ATLoss", loss_weight=at / len(convs)) for i in range(len(convs))},
                loss_forward_mappings={f"at{i}": dict(s_feature=dict(from_student=True, recorder=f"s{i}"),
                                                      t_feature=dict(from_student=False, recorder=f"t{i}"))
                                       for i in range(len(convs))})
            distiller.prepare(student, teacher)
        kl = KLDivergence(tau=float(smash_config["temperature"]), loss_weight=logits) if logits > 0 else None
        task = float(smash_config["task_weight"])
        if distiller is None and kl is None and task == 0:
            raise ConfigError("width_distill: at_weight, logits_weight and task_weight are all 0; nothing to train.")
        objective = DistillObjective(teacher, distiller, kl, task_weight=task)
        with frozen_teacher(teacher):
            train_student(student, smash_config, objective, self.algorithm_name)
        smash_config.state.update(kept_channels=kept, narrowed_layers=sorted(kept),
                                  last_parts={k: round(v, 6) for k, v in objective.last.items()})
        return student

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Narrow a freshly built base model to the recorded kept channels (the weights then load strictly)."""
        if "kept_channels" not in state:
            raise ConfigError("The saved width_distill state has no 'kept_channels'; the save is incomplete.")
        return registry.get(PRUNER)().replay(model, smash_config, state)
