"""kd_recover: recover quality after compression by distilling from the model as it entered smash."""

from __future__ import annotations

import copy
from typing import Any, ClassVar

from ConfigSpace import CategoricalHyperparameter, UniformFloatHyperparameter
from torch import nn

from slimkit.algorithms.recovery._training import (
    WeightTrainer,
    chosen_teacher,
    lora_hyperparameters,
    student_hyperparameters,
    teacher_hyperparameter,
    train_adapted,
)
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.core.registry import build_component, register
from slimkit.errors import ConfigError
from slimkit.training.distill import DistillObjective, frozen_teacher
from slimkit.utils import model_device

#: the output-level losses kd_recover_loss names (MMRazor's component names); DKDLoss and WSLD read the labels
LOSSES: tuple[str, ...] = ("KLDivergence", "DKDLoss", "DISTLoss", "WSLD")


@register
class KDRecover(WeightTrainer):
    """Knowledge-distillation recovery: the compressed model learns the original model's softened outputs.

    The teacher is the model as it was before smash, or the model saved in the folder ``teacher_ckpt`` names (a
    slimkit save or a Hugging Face folder; frozen, in eval mode either way); the loss on the outputs is ``loss``
    (weight ``distill_weight``, temperature ``temperature``): Hinton's ``KLDivergence`` (default), ``DKDLoss``
    (decoupled KD, needs labels), ``DISTLoss`` (correlation of predictions) or ``WSLD`` (weighted soft labels,
    needs labels) -- MMRazor's losses of those names -- plus ``task_weight`` x cross-entropy on the targets of
    ``cfg.data``. Training goes through slimkit's one loop (seeded, budgeted,
    early stopping on the validation split with ``patience``). ``lora_rank`` > 0 trains low-rank adapters (LoRA,
    via peft; for large language models) merged into the weights at the end. Only the weights change; the save
    keeps plain weights.
    """

    algorithm_name = "kd_recover"
    aliases = ("KDRecover",)
    #: smash hands this algorithm the model as it entered smash (``smash_config.original_model``)
    uses_original_model: ClassVar[bool] = True
    references = {"Paper": "https://arxiv.org/abs/1503.02531"}

    def get_hyperparameters(self) -> list:
        """Temperature and loss weights, then the shared training settings."""
        return [
            UniformFloatHyperparameter("temperature", 0.1, 100.0, default_value=4.0, log=True,
                                       meta={"desc": "Softmax temperature of the teacher and student outputs."}),
            CategoricalHyperparameter("loss", list(LOSSES), default_value="KLDivergence",
                                      meta={"desc": "Distillation loss on the outputs (MMRazor's names): KLDivergence, "
                                                    "DKDLoss and WSLD (use the labels), DISTLoss."}),
            UniformFloatHyperparameter("distill_weight", 0.0, 100.0, default_value=1.0,
                                       meta={"desc": "Weight of the KL divergence to the original model."}),
            UniformFloatHyperparameter("task_weight", 0.0, 100.0, default_value=1.0,
                                       meta={"desc": "Weight of the task loss (cross-entropy on the targets); 0 "
                                                     "distils from the teacher alone."}),
            teacher_hyperparameter("the model as it entered smash()"),
            *student_hyperparameters(epochs=3, lr=1e-3),
            *lora_hyperparameters(),
        ]

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        teacher = chosen_teacher(smash_config, getattr(smash_config, "original_model", None))
        if not isinstance(teacher, nn.Module):
            raise ConfigError("kd_recover distils from the model as it entered smash(), and none was handed to it; "
                              "run it through slimkit.smash(model, cfg).")
        device = model_device(model)
        if model_device(teacher) != device:
            teacher = copy.deepcopy(teacher).to(device)
        weight = float(smash_config["distill_weight"])
        logits = build_component({"type": str(smash_config["loss"]), "tau": float(smash_config["temperature"]),
                                  "loss_weight": weight}) if weight > 0 else None
        task = float(smash_config["task_weight"])
        if logits is None and task == 0:
            raise ConfigError("kd_recover_distill_weight and kd_recover_task_weight are both 0: nothing to train on.")
        objective = DistillObjective(teacher, logits_loss=logits, task_weight=task)
        with frozen_teacher(teacher):
            model = train_adapted(model, smash_config, objective, self.algorithm_name)
        smash_config.state["last_parts"] = {k: round(v, 6) for k, v in objective.last.items()}
        return model
