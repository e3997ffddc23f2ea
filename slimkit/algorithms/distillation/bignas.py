"""bignas: BigNAS (Yu et al., 2020) on the model itself -- sandwich-trained width supernet, evolution search."""

from __future__ import annotations

from typing import Any

from ConfigSpace import UniformFloatHyperparameter

from slimkit.algorithms.distillation._nas import evolution_hyperparameters, search
from slimkit.algorithms.distillation._width_nas import WidthNasModels, WidthRun, width_nas_hyperparameters
from slimkit.core.contract import SaveFn, SlimkitDistiller, SmashConfigPrefixWrapper
from slimkit.core.registry import register


@register
class BigNasSearch(WidthNasModels, SlimkitDistiller):
    """BigNAS: one-stage width supernet (sandwich rule, inplace distillation), evolution search, no retraining.

    The supernet and its training are ``autoslim``'s (see
    :class:`~slimkit.algorithms.distillation.autoslim.AutoSlimSearch`); BigNAS's point is that the trained subnets
    are used as they are. ``EvolutionSearchLoop`` (``num_candidates``, ``top_k``, ``max_epochs``, ``mutate_prob``,
    ``crossover_prob``) finds the subnet of lowest validation loss whose FLOPs stay under ``flops_ratio`` of the
    model's (and ``max_flops`` / ``max_params`` when set); it is exported as plain, physically narrower layers with
    the supernet's weights. On a plain CNN the search space is the widths (kernel and depth choices need a supernet
    built with those mutables: the MMRazor face's ``BigNAS``).
    """

    algorithm_name = "bignas"
    dataset_required = True
    save_fn = SaveFn.REPLAY
    references = {"Paper (BigNAS)": "https://arxiv.org/abs/2003.11142",
                  "MMRazor BigNAS": "https://github.com/open-mmlab/mmrazor/tree/main/configs/nas/mmcls/bignas"}

    def get_hyperparameters(self) -> list:
        """``autoslim``'s, plus the evolution search and a parameter budget."""
        return [
            *width_nas_hyperparameters(),
            UniformFloatHyperparameter("max_params", 0.0, 1e15, default_value=0.0,
                                       meta={"desc": "Parameter budget of the subnet (0: none)."}),
            *evolution_hyperparameters(),
        ]

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        run = WidthRun(model, smash_config, self.algorithm_name, max_params=True)
        trained = run.train()
        result = search(run.supernet, smash_config, run.example, run.limit, run.seed, self.algorithm_name)
        student, state = run.export(result.best_subnet, model.training)
        smash_config.state.update(state, supernet_steps=trained.steps, best_score=round(result.best_score, 6),
                                  search_history=[round(h, 6) for h in result.history], evaluated=result.evaluated)
        return student
