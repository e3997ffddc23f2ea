"""layer_drop: keep a subset of a transformer's blocks and distil the full model into the shallower one."""

from __future__ import annotations

import copy
from typing import Any

from ConfigSpace import CategoricalHyperparameter, UniformFloatHyperparameter
from torch import nn

from slimkit.algorithms.distillation._layers import (
    check_keep,
    check_teacher_stack,
    default_keep,
    find_layer_stack,
    keep_layers,
    teacher_targets,
)
from slimkit.algorithms.recovery._training import (
    chosen_teacher,
    student_hyperparameters,
    teacher_hyperparameter,
    train_student,
)
from slimkit.core.contract import SaveFn, SlimkitDistiller, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import ConfigListHyperparameter
from slimkit.core.registry import register
from slimkit.errors import ConfigError
from slimkit.training.distill import (
    ConfigurableDistiller,
    CosineSimilarityLoss,
    DistillObjective,
    KLDivergence,
    MSELoss,
    frozen_teacher,
)

#: how the student's outputs follow the teacher's: logits (KL), embeddings (cosine) or raw values (MSE)
OUTPUT_LOSSES = ("kl", "cosine", "mse")


class BlockIndices(ConfigListHyperparameter):
    """A list of block indices such as ``[0, 2, 4]`` (empty: every other block)."""

    def legal_value(self, value: Any) -> bool:  # type: ignore[override]
        """Accept a list or tuple of non-negative integers."""
        return isinstance(value, (list, tuple)) and all(type(v) is int and v >= 0 for v in value)

    def describe(self) -> str:
        """What the hyperparameter accepts."""
        return "a list of block indices, e.g. [0, 2, 4] ([] keeps every other block)"


@register
class LayerDrop(SlimkitDistiller):
    """Layer dropping with distillation: keep a subset of a transformer's blocks, distil the full model into it.

    The blocks are the model's longest list of identical blocks (Llama/GPT-2/BERT layers). Each kept block is
    trained to output what the teacher's last block of the span it replaces outputs (mean squared error,
    ``hidden_weight``), and the student's outputs follow the teacher's (``logits_weight``): softened logits by
    KL at ``temperature`` (``output_loss="kl"``, language models and classifiers), or pooled embeddings by
    cosine distance (``"cosine"``, sentence encoders) or MSE; ``task_weight`` adds the task loss.
    ``teacher_ckpt`` names a saved model to learn from instead of the full one (for hidden states, with the same
    block list and depth as the model). The save
    records the kept indices and rebuilds the shallower model before loading its weights.
    """

    algorithm_name = "layer_drop"
    aliases = ("LayerDrop",)
    dataset_required = True
    save_fn = SaveFn.REPLAY
    replay_on_meta = True  # replay only drops blocks; it reads no weight values
    references = {"Paper (DistilBERT)": "https://arxiv.org/abs/1910.01108",
                  "Paper (layer dropping)": "https://arxiv.org/abs/1909.11556"}

    def get_hyperparameters(self) -> list:
        """Which blocks to keep, the loss weights, then the shared training settings."""
        return [
            BlockIndices("keep_layers", meta={"desc": "Indices of the blocks to keep, e.g. [0, 2, 4]; empty keeps "
                                                      "every other block starting with the first."}),
            UniformFloatHyperparameter("hidden_weight", 0.0, 100.0, default_value=1.0,
                                       meta={"desc": "Weight of the hidden-state MSE between kept blocks and the "
                                                     "teacher blocks they replace."}),
            UniformFloatHyperparameter("logits_weight", 0.0, 100.0, default_value=1.0,
                                       meta={"desc": "Weight of the output loss to the teacher's outputs."}),
            CategoricalHyperparameter("output_loss", list(OUTPUT_LOSSES), default_value="kl",
                                      meta={"desc": "How the outputs follow the teacher's: 'kl' on softened logits, "
                                                    "'cosine' on embeddings (sentence encoders), 'mse'."}),
            UniformFloatHyperparameter("temperature", 0.1, 100.0, default_value=2.0, log=True,
                                       meta={"desc": "Softmax temperature of the output distillation."}),
            UniformFloatHyperparameter("task_weight", 0.0, 100.0, default_value=0.0,
                                       meta={"desc": "Weight of the task loss on the data's targets."}),
            teacher_hyperparameter("the full model (the model handed to it)"),
            *student_hyperparameters(epochs=1, lr=1e-3),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """Needs a list of at least two identical blocks."""
        return isinstance(model, nn.Module) and find_layer_stack(model) is not None

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return "It drops blocks of a transformer stack (an nn.ModuleList of >= 2 identical blocks); the model has none."

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        stack, blocks = find_layer_stack(model)  # type: ignore[misc]  (model_check_fn ran)
        total = len(blocks)
        keep = check_keep(list(smash_config["keep_layers"]) or default_keep(total), total, "layer_drop_keep_layers")
        student = keep_layers(copy.deepcopy(model), stack, keep)
        teacher = chosen_teacher(smash_config, model)
        if teacher is not model and float(smash_config["hidden_weight"]) > 0:
            check_teacher_stack(teacher, stack, total)
        hidden, logits = float(smash_config["hidden_weight"]), float(smash_config["logits_weight"])
        distiller = None
        if hidden > 0:
            pairs = list(zip(range(len(keep)), teacher_targets(keep, total), strict=True))
            distiller = ConfigurableDistiller(
                student_recorders={f"s{j}": dict(type="ModuleOutputs", source=f"{stack}.{j}") for j, _ in pairs},
                teacher_recorders={f"t{t}": dict(type="ModuleOutputs", source=f"{stack}.{t}") for _, t in pairs},
                distill_losses={f"hidden{j}": MSELoss(loss_weight=hidden / len(pairs)) for j, _ in pairs},
                loss_forward_mappings={f"hidden{j}": dict(s_feature=dict(from_student=True, recorder=f"s{j}"),
                                                          t_feature=dict(from_student=False, recorder=f"t{t}"))
                                       for j, t in pairs})
            distiller.prepare(student, teacher)
        task = float(smash_config["task_weight"])
        if distiller is None and logits == 0 and task == 0:
            raise ConfigError("layer_drop: hidden_weight, logits_weight and task_weight are all 0; nothing to train.")
        objective = DistillObjective(teacher, distiller, self._output_loss(smash_config, logits), task_weight=task)
        with frozen_teacher(teacher):
            train_student(student, smash_config, objective, self.algorithm_name)
        smash_config.state.update(stack=stack, keep_layers=keep, original_layers=total,
                                  last_parts={k: round(v, 6) for k, v in objective.last.items()})
        return student

    @staticmethod
    def _output_loss(smash_config: SmashConfigPrefixWrapper, weight: float) -> nn.Module | None:
        kind = smash_config["output_loss"]
        if weight <= 0:
            return None
        if kind == "cosine":
            return CosineSimilarityLoss(loss_weight=weight)
        if kind == "mse":
            return MSELoss(loss_weight=weight)
        return KLDivergence(tau=float(smash_config["temperature"]), loss_weight=weight)

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Drop the same blocks from a freshly built base model (the saved weights then load strictly)."""
        if "stack" not in state or "keep_layers" not in state:
            raise ConfigError("The saved layer_drop state has no 'stack'/'keep_layers'; the save is incomplete.")
        return keep_layers(model, state["stack"], state["keep_layers"])
