"""autoslim: AutoSlim (Yu & Huang, 2019) on the model itself -- a slimmable width supernet, then greedy slimming."""

from __future__ import annotations

from typing import Any

from slimkit.algorithms.distillation._nas import scoring
from slimkit.algorithms.distillation._width_nas import WidthNasModels, WidthRun, width_nas_hyperparameters
from slimkit.core.contract import SaveFn, SlimkitDistiller, SmashConfigPrefixWrapper
from slimkit.core.registry import register
from slimkit.engines.nas import GreedyChannelSearch


@register
class AutoSlimSearch(WidthNasModels, SlimkitDistiller):
    """AutoSlim: width supernet, sandwich-rule training, greedy channel slimming to a FLOPs budget.

    The model becomes a width supernet (every group of coupled conv/linear channels gets the choices
    ``width_ratios`` of its width, rounded to ``divisor``, strongest channels first; see
    :mod:`slimkit.engines.nas.searchable`), trained with the sandwich rule and inplace distillation (the widest
    subnet on the labels, the narrowest and ``num_random_samples`` random ones on its predictions). Greedy
    slimming (:class:`~slimkit.engines.nas.GreedyChannelSearch`, MMRazor's ``AutoSlimGreedySearchLoop``) then
    narrows, from the widest subnet, whichever group loses least validation loss, one width choice at a time,
    until the FLOPs are within ``flops_ratio`` of the model's (and ``max_flops``). That subnet is exported as plain,
    physically narrower layers with the supernet's weights; the save records their shapes and rebuilds them.
    """

    algorithm_name = "autoslim"
    dataset_required = True
    save_fn = SaveFn.REPLAY
    references = {"Paper (AutoSlim)": "https://arxiv.org/abs/1903.11728",
                  "MMRazor AutoSlim": "https://github.com/open-mmlab/mmrazor/tree/main/configs/nas/mmcls/autoslim"}

    def get_hyperparameters(self) -> list:
        """Search space, FLOPs budget, sandwich training and the scoring of each greedy step."""
        return width_nas_hyperparameters()

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        run = WidthRun(model, smash_config, self.algorithm_name)
        trained = run.train()
        score_fn, calibrate_fn = scoring(smash_config, run.seed)
        result = GreedyChannelSearch(run.supernet, run.limit, score_fn=score_fn, example_inputs=run.example,
                                     calibrate_fn=calibrate_fn, units="slimkit", progress=False).run()[0]
        student, state = run.export(result.subnet, model.training)
        smash_config.state.update(state, supernet_steps=trained.steps, best_score=round(result.score, 6),
                                  greedy_steps=[{k: (round(v, 6) if isinstance(v, float) else v)
                                                 for k, v in step.items()} for step in result.history])
        return student
