"""spos_search: one-shot NAS on the model itself -- a width supernet, SPOS training, evolution search, distillation."""

from __future__ import annotations

import copy
from typing import Any

from torch import nn

from slimkit.algorithms.distillation._nas import (
    check_reachable,
    constraints,
    evolution_hyperparameters,
    example_batch,
    flops_limit,
    scoring_hyperparameters,
    search,
    train_supernet,
)
from slimkit.algorithms.distillation._width_nas import WidthNasModels, WidthRatios
from slimkit.algorithms.recovery._training import (
    chosen_teacher,
    student_hyperparameters,
    teacher_hyperparameter,
    train_student,
)
from slimkit.core.contract import SaveFn, SlimkitDistiller, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import integer, real
from slimkit.core.registry import register
from slimkit.engines.nas import export_subnet
from slimkit.engines.nas.searchable import layer_shapes, make_searchable
from slimkit.errors import ConfigError
from slimkit.training.distill import DistillObjective, KLDivergence, frozen_teacher


@register
class SposSearch(WidthNasModels, SlimkitDistiller):
    """One-shot NAS of a CNN's channel widths: SPOS supernet training, evolution search, then distillation.

    The model becomes a width supernet (every group of coupled conv/linear channels gets the choices
    ``width_ratios`` of its width, strongest channels first, see :mod:`slimkit.engines.nas.searchable`), is
    trained one uniformly sampled subnet per step (SPOS) on the model's softened outputs and the task loss, then
    ``EvolutionSearchLoop`` finds the subnet of lowest validation loss whose FLOPs stay under ``flops_ratio`` of
    the model's (and ``max_flops`` / ``max_params`` when set). That subnet is exported as plain layers and
    trained like ``width_distill``'s student (KL at ``temperature`` to the model as it entered smash, or
    ``teacher_ckpt``, plus the task loss). The save records the layer shapes and rebuilds them before loading.
    """

    algorithm_name = "spos_search"
    aliases = ("SposSearch", "one_shot_nas")
    dataset_required = True
    save_fn = SaveFn.REPLAY
    references = {"Paper (SPOS)": "https://arxiv.org/abs/1904.00420",
                  "MMRazor SPOS": "https://github.com/open-mmlab/mmrazor/tree/main/configs/nas/mmcls/spos"}

    def get_hyperparameters(self) -> list:
        """Search space, supernet training, evolution search, constraints, distillation, then the retraining."""
        return [
            WidthRatios("width_ratios", (0.25, 0.5, 0.75, 1.0), meta={
                "desc": "Width choices of every searchable channel group, as fractions of its width."}),
            integer("supernet_epochs", 1, 1000, 3, "Passes over the train data while training the supernet."),
            integer("supernet_steps", 0, 10**7, 0, "Stop supernet training after this many steps (0: no limit)."),
            real("supernet_lr", 1e-6, 1.0, 3e-3, "Adam learning rate of the supernet training."),
            *evolution_hyperparameters(),
            real("flops_ratio", 0.01, 1.0, 0.5, "FLOPs limit as a fraction of the model's FLOPs."),
            real("max_flops", 0.0, 1e18, 0.0, "Absolute FLOPs limit per example (0: only flops_ratio)."),
            real("max_params", 0.0, 1e15, 0.0, "Parameter limit of the subnet (0: none)."),
            *scoring_hyperparameters(),
            real("logits_weight", 0.0, 100.0, 1.0, "Weight of the KL divergence to the teacher's outputs."),
            real("temperature", 0.1, 100.0, 4.0, "Softmax temperature of the output distillation."),
            real("task_weight", 0.0, 100.0, 1.0, "Weight of the task loss on the data's targets."),
            teacher_hyperparameter("the model handed to it"),
            *student_hyperparameters(epochs=3, lr=3e-3),
        ]

    def _objective(self, smash_config: SmashConfigPrefixWrapper, teacher: nn.Module) -> DistillObjective:
        logits, task = float(smash_config["logits_weight"]), float(smash_config["task_weight"])
        if logits == 0 and task == 0:
            raise ConfigError("spos_search: logits_weight and task_weight are both 0; nothing to train.")
        kl = KLDivergence(tau=float(smash_config["temperature"]), loss_weight=logits) if logits > 0 else None
        return DistillObjective(teacher, None, kl, task_weight=task)

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        seed, example = int(smash_config["seed"]), example_batch(smash_config, model)
        teacher = chosen_teacher(smash_config, model)
        flops, limit = flops_limit(smash_config, model, example)
        supernet = make_searchable(copy.deepcopy(model), example, tuple(smash_config["width_ratios"]))
        check_reachable(supernet, example, constraints(smash_config, limit))
        objective = self._objective(smash_config, teacher)
        with frozen_teacher(teacher):
            trained = train_supernet(supernet, smash_config, objective, seed)
            result = search(supernet, smash_config, example, limit, seed)
            student = export_subnet(supernet).model
            student.train(model.training)
            train_student(student, smash_config, objective, self.algorithm_name)
        before, after = layer_shapes(model), layer_shapes(student)
        smash_config.state.update(
            subnet=result.best_subnet, search_space={f"widths.{n}": m.choices for n, m in supernet.widths.items()},
            layer_shapes={n: s for n, s in after.items() if before.get(n) != s},
            flops_before=flops, flops_limit=limit, flops_after=result.metrics.get("flops"),
            best_score=round(result.best_score, 6), search_history=[round(h, 6) for h in result.history],
            evaluated=result.evaluated, supernet_steps=trained.steps,
            last_parts={k: round(v, 6) for k, v in objective.last.items()})
        return student
