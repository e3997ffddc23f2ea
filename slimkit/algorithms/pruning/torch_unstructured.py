"""torch_unstructured: zero the smallest-magnitude (or random) individual weights of chosen layer types."""

from __future__ import annotations

import fnmatch
from typing import Any

import torch
from ConfigSpace import CategoricalHyperparameter, UniformFloatHyperparameter, UniformIntegerHyperparameter

from slimkit.core.contract import SaveFn, SlimkitPruner, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import ListHyperparameter
from slimkit.core.registry import register

_TYPES = ("Linear", "Conv1d", "Conv2d", "Conv3d")


def _targets(model: torch.nn.Module, types: tuple[str, ...], exclude: tuple[str, ...]) -> list[tuple[str, Any]]:
    wanted = tuple(getattr(torch.nn, t) for t in types)
    return [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, wanted) and not any(fnmatch.fnmatchcase(name, p) for p in exclude)
    ]


def unstructured_mask(weight: torch.Tensor, sparsity: float, method: str, generator: torch.Generator) -> torch.Tensor:
    """Boolean keep-mask with exactly ``round(sparsity * numel)`` False entries (smallest |w| or random)."""
    n_prune = int(round(sparsity * weight.numel()))
    keep = torch.ones(weight.numel(), dtype=torch.bool, device=weight.device)
    if n_prune == 0:
        return keep.view_as(weight)
    if method == "l1":
        order = torch.argsort(weight.detach().abs().flatten().float(), stable=True)
    else:
        order = torch.randperm(weight.numel(), generator=generator).to(weight.device)
    keep[order[:n_prune]] = False
    return keep.view_as(weight)


@register
class TorchUnstructured(SlimkitPruner):
    """Unstructured pruning: set a fraction of each target layer's weights to zero, layer by layer.

    ``l1`` removes the weights of smallest magnitude, ``random`` a seeded random subset. The zeros are written
    into the weights, so they survive save/load; dense kernels do not run faster on zeros, so pair it with a
    sparse-aware runtime or use a structured pruner for speed.
    """

    algorithm_name = "torch_unstructured"
    references = {"Paper": "https://arxiv.org/abs/1506.02626"}
    save_fn = SaveFn.KEEP

    def get_hyperparameters(self) -> list:
        """Sparsity, method, layer types, exclusions and seed."""
        return [
            UniformFloatHyperparameter("sparsity", 0.0, 0.99, default_value=0.1,
                                       meta={"desc": "Fraction of weights zeroed in each target layer."}),
            CategoricalHyperparameter("method", ["l1", "random"], default_value="l1",
                                      meta={"desc": "l1: smallest |weight| first; random: seeded random choice."}),
            ListHyperparameter("target_modules", ("Linear", "Conv2d"),
                               meta={"desc": f"torch.nn layer types to prune, among {', '.join(_TYPES)}."}),
            ListHyperparameter("exclude", (), meta={"desc": "fnmatch patterns of module names left dense."}),
            UniformIntegerHyperparameter("seed", 0, 2**31 - 1, default_value=0,
                                         meta={"desc": "Seed of the random method."}),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """Needs a Linear or Conv layer."""
        return isinstance(model, torch.nn.Module) and bool(_targets(model, _TYPES, ()))

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return f"It prunes {', '.join(_TYPES)} layers and the model has none."

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        types = tuple(smash_config["target_modules"])
        bad = [t for t in types if t not in _TYPES]
        if bad:
            from slimkit.errors import ConfigError

            raise ConfigError(f"torch_unstructured_target_modules has {bad}; allowed types: {', '.join(_TYPES)}.")
        generator = torch.Generator().manual_seed(smash_config["seed"])
        pruned = 0
        with torch.no_grad():
            for _, module in _targets(model, types, tuple(smash_config["exclude"])):
                keep = unstructured_mask(module.weight, smash_config["sparsity"], smash_config["method"], generator)
                module.weight.mul_(keep.to(module.weight.dtype))
                pruned += int((~keep).sum())
        smash_config.state["pruned_weights"] = pruned
        return model
