"""AutoformerBackbone: a vision-transformer supernet (Chen et al., "AutoFormer", ICCV 2021; MMRazor's backbone).

``arch_setting=dict(mlp_ratios=[...], num_heads=[...], depth=[...], embed_dims=[...])``: one embedding width for
the whole network (patch embedding, position embedding, every norm and residual stream), and per block a number
of attention heads (q/k/v width = heads x ``head_dim``) and an MLP width; the depth keeps the first ``d`` blocks.
All choices share the widest weights (weight entanglement): a smaller choice uses the first channels. The MLP
width choices are ``ratio x the largest embedding width`` (MMRazor scales them by the current embedding width;
here each is a width choice of its own). Tokens are mean-pooled after the final norm (no class token): the
output is ``[N, embed]``, and ``last_mutable`` is the embedding width a head shares
(``DynamicLinear(backbone.last_mutable, num_classes)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from slimkit.engines.nas.dynamic_ops import DynamicConv2d, DynamicLayerNorm, DynamicLinear, DynamicPositionEmbedding
from slimkit.engines.nas.mutables import MutableChannels, MutableSequential
from slimkit.errors import ConfigError
from slimkit.faces.mmrazor.builder import register_module

_KEYS = ("mlp_ratios", "num_heads", "depth", "embed_dims")


class TransformerBlock(nn.Module):
    """Pre-norm attention + MLP with searchable head count and MLP width (their widths are its mutables)."""

    def __init__(self, embed: MutableChannels, heads: Sequence[int], hidden: Sequence[int], head_dim: int,
                 qkv_bias: bool) -> None:
        super().__init__()
        self.attn_width = MutableChannels(sorted({h * head_dim for h in heads}))
        self.mlp_width = MutableChannels(sorted(set(hidden)))
        self.head_dim = head_dim
        self.norm1, self.norm2 = DynamicLayerNorm(embed), DynamicLayerNorm(embed)
        self.q, self.k, self.v = (DynamicLinear(embed, self.attn_width, qkv_bias) for _ in range(3))
        self.proj = DynamicLinear(self.attn_width, embed)
        self.fc1, self.fc2 = DynamicLinear(embed, self.mlp_width), DynamicLinear(self.mlp_width, embed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x + attention(norm(x))``, then ``+ mlp(norm(.))``; the head count follows the q width."""
        n, length, _ = x.shape
        h = self.norm1(x)
        q, k, v = (layer(h) for layer in (self.q, self.k, self.v))
        heads = q.shape[-1] // self.head_dim
        q, k, v = (t.view(n, length, heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(n, length, heads * self.head_dim)
        x = x + self.proj(attn)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


@register_module()
class AutoformerBackbone(nn.Module):
    """The AutoFormer supernet backbone (see the module doc); ``img_size`` / ``patch_size`` fix the token count."""

    def __init__(self, arch_setting: Mapping[str, Sequence[Any]], img_size: int = 224, patch_size: int = 16,
                 in_channels: int = 3, head_dim: int = 64, qkv_bias: bool = True,
                 conv_cfg: Mapping[str, Any] | None = None, norm_cfg: Mapping[str, Any] | None = None,
                 act_cfg: Mapping[str, Any] | None = None, use_final_norm: bool = True,
                 init_cfg: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        if not isinstance(arch_setting, Mapping) or sorted(arch_setting) != sorted(_KEYS) or not all(
                isinstance(arch_setting[k], Sequence) and arch_setting[k] for k in _KEYS):
            raise ConfigError(f"AutoformerBackbone arch_setting must be dict(mlp_ratios=[...], num_heads=[...], "
                              f"depth=[...], embed_dims=[...]) with non-empty lists, got {arch_setting!r}.")
        ints = [v for k in ("num_heads", "depth", "embed_dims") for v in arch_setting[k]]
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in ints) or any(
                isinstance(r, bool) or not isinstance(r, (int, float)) or r <= 0 for r in arch_setting["mlp_ratios"]):
            raise ConfigError(f"AutoformerBackbone: num_heads, depth and embed_dims must be integers >= 1 and "
                              f"mlp_ratios numbers > 0, got {dict(arch_setting)!r}.")
        if img_size % patch_size:
            raise ConfigError(f"AutoformerBackbone: img_size {img_size} must be a multiple of patch_size {patch_size}.")
        self.embed = MutableChannels(sorted(set(arch_setting["embed_dims"])))  # registered first: "embed"
        widest = self.embed.max_choice
        hidden = [max(1, round(r * widest)) for r in arch_setting["mlp_ratios"]]
        self.patch_embed = DynamicConv2d(in_channels, self.embed, patch_size, patch_size)
        self.pos_embed = DynamicPositionEmbedding((img_size // patch_size) ** 2, self.embed)
        blocks = [TransformerBlock(self.embed, arch_setting["num_heads"], hidden, head_dim, qkv_bias)
                  for _ in range(max(arch_setting["depth"]))]
        self.blocks = MutableSequential(blocks, sorted(set(arch_setting["depth"])))
        self.norm = DynamicLayerNorm(self.embed) if use_final_norm else nn.Identity()

    @property
    def last_mutable(self) -> MutableChannels:
        """The embedding width (what a classification head's input follows)."""
        return self.embed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Mean-pooled tokens ``[N, embed]``."""
        tokens = self.pos_embed(self.patch_embed(x).flatten(2).transpose(1, 2))
        return self.norm(self.blocks(tokens)).mean(dim=1)
