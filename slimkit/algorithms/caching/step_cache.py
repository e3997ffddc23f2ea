"""step_cache: a diffusion UNet reuses its deep features between full denoising steps (DeepCache)."""

from __future__ import annotations

from typing import Any

import torch
from ConfigSpace import UniformIntegerHyperparameter

from slimkit.core.contract import SaveFn, SlimkitCacher, SmashConfigPrefixWrapper
from slimkit.core.registry import register
from slimkit.engines.caching import attach_step_cache
from slimkit.engines.caching.step import deep_blocks
from slimkit.errors import ConfigError

UNETS = ("UNet2DModel", "UNet2DConditionModel")


@register
class StepCache(SlimkitCacher):
    """Run a diffusers UNet in full every ``interval`` denoising steps and only its shallow path in between.

    The deep down blocks, the mid block and the deep up blocks run on full steps only; the steps between reuse
    their recorded output with fresh shallow features and skip connections (DeepCache). A call whose timestep
    does not fall below the previous call's starts a new run in full, so single calls are exact.
    ``model.step_cache.stats()`` counts full and cached steps.
    """

    algorithm_name = "step_cache"
    near_names = ("fora", "fastercache", "pab")  # Pruna's names for close algorithms (errors point here)
    aliases = ("deepcache",)  # Pruna's name (DeepCache: reuse the deep features between steps)
    references = {"DeepCache (Ma et al., CVPR 2024)": "https://arxiv.org/abs/2312.00858",
                  "Pruna deepcache": "https://docs.pruna.ai/en/stable/compression.html#deepcache"}
    save_fn = SaveFn.REAPPLY
    extra = "diffusion"

    def get_hyperparameters(self) -> list:
        """Full-step interval and the depth of the shallow path."""
        return [
            UniformIntegerHyperparameter("interval", 1, 100, default_value=3,
                                         meta={"desc": "Every interval-th step runs the whole UNet; the others reuse "
                                                       "its deep features (1 = no reuse)."}),
            UniformIntegerHyperparameter("branch", 0, 10, default_value=0,
                                         meta={"desc": "Down/up block levels kept on cached steps beyond the first "
                                                       "(0 = only the outermost level; more is slower, closer)."}),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """Diffusers UNet2DModel and UNet2DConditionModel (down, mid and up blocks)."""
        names = {cls.__name__ for cls in type(model).__mro__}
        return (isinstance(model, torch.nn.Module) and bool(names & set(UNETS))
                and hasattr(model, "down_blocks") and hasattr(model, "up_blocks"))

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return ("It reuses the deep features of diffusers UNet2DModel / UNet2DConditionModel between denoising "
                "steps; pass the pipeline's `unet`.")

    def import_algorithm_packages(self) -> dict[str, Any]:
        """Import diffusers (pip install 'slimkit[diffusion]')."""
        import diffusers

        return {"diffusers": diffusers}

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        branch = int(smash_config["branch"])
        if not deep_blocks(model, branch):
            raise ConfigError(f"step_cache_branch={branch} leaves no deep block to reuse in this UNet "
                              f"({len(model.down_blocks)} down blocks); set cfg['step_cache_branch'] = "
                              f"{max(len(model.down_blocks) - 2, 0)} or lower.")
        return attach_step_cache(model, int(smash_config["interval"]), branch)
