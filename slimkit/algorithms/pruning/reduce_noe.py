"""reduce_noe: route each token of a Mixture-of-Experts model through fewer experts (top-k of the router)."""

from __future__ import annotations

from typing import Any

import torch

from slimkit.core.contract import SaveFn, SlimkitPruner, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import TextHyperparameter, integer
from slimkit.core.registry import register
from slimkit.errors import ConfigError

#: module attributes that hold the top-k of transformers' MoE routers and sparse blocks (Mixtral, Qwen2/3-MoE, ...)
TOP_K_ATTRIBUTES = ("top_k", "num_experts_per_tok")
#: config fields that count a model's routed experts
EXPERT_COUNTS = ("num_local_experts", "num_experts", "n_routed_experts")


def _text_config(model: Any) -> Any:
    config = getattr(model, "config", None)
    return getattr(config, "text_config", None) or config


def _routers(model: torch.nn.Module) -> list[tuple[str, str]]:
    """``(module name, attribute)`` of every integer top-k held by the model's MoE modules."""
    found = []
    for name, module in model.named_modules():
        if not any(k in type(module).__name__.lower() for k in ("moe", "router", "gate", "sparse")) and name:
            continue
        found += [(name, a) for a in TOP_K_ATTRIBUTES if isinstance(getattr(module, a, None), int)]
    return found


@register
class ReduceNOE(SlimkitPruner):
    """Reduce the number of experts each token is routed to in a Mixture-of-Experts language model.

    Sets the model config's ``num_experts_per_tok`` (Pruna's ``target_name``) and the top-k of every router, so
    each token runs ``num_experts_per_token`` experts instead of the trained number: fewer expert matmuls per
    token, no weight changed. Quality drops as k falls below the trained value; measure it (perplexity) before
    shipping. Works on transformers' Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE and other routers holding ``top_k``.
    """

    algorithm_name = "reduce_noe"
    references = {"Pruna": "https://github.com/PrunaAI/pruna"}
    save_fn = SaveFn.REAPPLY  # the weights are the base model's; the top-k is set again on load

    def get_hyperparameters(self) -> list:
        """Pruna's num_experts_per_token and target_name."""
        return [
            integer("num_experts_per_token", 1, 256, 2, "Experts each token is routed to (at most the model's number "
                    "of experts)."),
            TextHyperparameter("target_name", "num_experts_per_tok", meta={
                "desc": "The config field holding the top-k, e.g. 'num_experts_per_tok' for Mixtral."}),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """Needs a transformers MoE model: a config with ``num_experts_per_tok`` and routers holding a top-k."""
        config = _text_config(model)
        return (isinstance(model, torch.nn.Module) and config is not None
                and isinstance(getattr(config, "num_experts_per_tok", None), int) and bool(_routers(model)))

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return ("It changes the router top-k of Mixture-of-Experts language models (transformers' Mixtral, "
                "Qwen2-MoE, Qwen3-MoE, OLMoE...); the model has no config 'num_experts_per_tok' or no router.")

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        config, target, k = _text_config(model), smash_config["target_name"], smash_config["num_experts_per_token"]
        if not isinstance(getattr(config, target, None), int):
            raise ConfigError(f"reduce_noe_target_name={target!r} is not an integer field of the model's config "
                              f"({type(config).__name__}); use 'num_experts_per_tok'.")
        experts = next((getattr(config, c) for c in EXPERT_COUNTS if isinstance(getattr(config, c, None), int)), None)
        if experts is not None and k > experts:
            raise ConfigError(f"reduce_noe_num_experts_per_token={k} is more than the model's {experts} experts; "
                              f"choose 1 to {experts}.")
        before = getattr(config, target)
        setattr(config, target, k)
        routers = _routers(model)
        for name, attribute in routers:
            setattr(model.get_submodule(name), attribute, k)
        smash_config.state.update(experts_per_token_before=before, experts_per_token=k,
                                  routers=sorted({n for n, _ in routers if n}))
        return model
