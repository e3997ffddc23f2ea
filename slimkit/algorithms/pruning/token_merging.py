"""token_merging: ToMe for Hugging Face ViT / DeiT, merging ``r`` similar tokens in every block."""

from __future__ import annotations

from typing import Any

import torch

from slimkit.core.contract import SaveFn, SlimkitPruner, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Boolean, integer
from slimkit.core.registry import register
from slimkit.engines.token_merging import apply_token_merging, vit_layers


def _protected(model: torch.nn.Module) -> int:
    """Leading tokens never merged: the class token, and DeiT's distillation token when the model has one."""
    return 2 if any(hasattr(m, "distillation_token") for m in model.modules()) else 1


@register
class TokenMerging(SlimkitPruner):
    """Token Merging (ToMe): merge the ``r`` most similar tokens after the attention of every ViT block.

    Bipartite soft matching on the attention keys pairs similar tokens, which are averaged (weighted by how many
    patches each already holds), so the sequence shrinks by ``r`` per block and the later blocks compute on fewer
    tokens; proportional attention keeps a merged token's weight. No training; the class token is never merged,
    so classification heads work unchanged (the last hidden state has fewer tokens). Our implementation of the
    paper (slimkit.engines.token_merging) for transformers' ViT and DeiT.
    """

    algorithm_name = "token_merging"
    references = {"Paper": "https://arxiv.org/abs/2210.09461", "GitHub": "https://github.com/facebookresearch/ToMe"}
    save_fn = SaveFn.REAPPLY  # no weight changes: the patch is installed again on load

    def get_hyperparameters(self) -> list:
        """Pruna's r and prop_attn."""
        return [
            integer("r", 0, 128, 16, "Tokens merged per transformer block (at most half of the tokens left); more is "
                    "faster and less accurate."),
            Boolean("prop_attn", True, meta={"desc": "Proportional attention: a merged token is attended as the "
                                                     "number of patches it holds."}),
        ]

    def model_check_fn(self, model: Any) -> bool:
        """Needs transformers ViT-style blocks (ViTLayer / DeiTLayer)."""
        return isinstance(model, torch.nn.Module) and bool(vit_layers(model))

    def model_check_reason(self) -> str:
        """Which models are supported."""
        return ("It merges tokens inside transformers' ViT / DeiT blocks (ViTLayer: layernorm_before, attention "
                "with q/k/v projections, layernorm_after, mlp); the model has none.")

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        protected = _protected(model)
        merged = apply_token_merging(model, smash_config["r"], smash_config["prop_attn"], protected)
        smash_config.state.update(merged_per_layer=merged, protected_tokens=protected)
        return model
