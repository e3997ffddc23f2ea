"""Token Merging (ToMe, Bolya et al. 2023) for transformers' ViT-style encoders: fewer tokens after every block.

Between the attention and the MLP of each block, the ``r`` most similar token pairs are merged by bipartite soft
matching: the tokens are split alternately into sets A and B, each A token finds its most similar B token by the
cosine of their attention keys (averaged over heads), and the ``r`` A tokens with the best matches are averaged
into their partners, weighted by how many patches each already stands for (its "size"). Proportional attention
adds ``log(size)`` to the attention logits so a merged token weighs as the patches it replaced. The class token
(and DeiT's distillation token) are never merged and stay at their positions.

The patch is installed as each layer's own ``forward`` (:mod:`slimkit.engines._patch`), so the model's state
dict and classes are unchanged; the sizes live in one dict shared by the layers and reset by the first layer.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from slimkit.engines._patch import patch_forward

#: what a block must hold for the patch (transformers' ViTLayer / DeiTLayer)
LAYER_PARTS = ("layernorm_before", "attention", "layernorm_after", "mlp")
PATCH_ATTRIBUTE = "_slimkit_tome"


def vit_layers(model: nn.Module) -> list[nn.Module]:
    """The model's ViT-style encoder blocks (attention with a ``k_proj``, pre-norm, MLP), in order."""
    return [m for m in model.modules() if all(hasattr(m, p) for p in LAYER_PARTS)
            and isinstance(getattr(m.attention, "k_proj", None), nn.Linear)]


def bipartite_merge(x: torch.Tensor, size: torch.Tensor, metric: torch.Tensor, r: int,
                    protected: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge ``r`` tokens of ``x`` ``[B, T, C]`` into their most similar partners (size-weighted averages).

    ``metric`` ``[B, T, D]`` gives the similarity, ``size`` ``[B, T, 1]`` how many patches each token holds;
    the first ``protected`` tokens are never merged and keep their positions. Returns ``(x, size)`` with
    ``T - r`` tokens.
    """
    t = x.shape[1]
    r = min(r, (t - protected) // 2)
    if r <= 0:
        return x, size
    metric = metric / metric.norm(dim=-1, keepdim=True).clamp_min(1e-6)
    set_a, set_b = metric[:, ::2], metric[:, 1::2]
    scores = set_a @ set_b.transpose(-1, -2)  # [B, Ta, Tb]
    # protected token i sits in A (even i) or B (odd i): never a source, never a destination
    a_front, b_front = (protected + 1) // 2, protected // 2
    scores[:, :a_front, :] = -torch.inf
    scores[:, :, :b_front] = -torch.inf
    best, partner = scores.max(dim=-1)  # [B, Ta]
    order = best.argsort(dim=-1, descending=True)
    merged, kept = order[:, :r], order[:, r:].sort(dim=-1).values  # kept A tokens stay in their order
    weighted = torch.cat([x * size, size], dim=-1)
    a, b = weighted[:, ::2], weighted[:, 1::2]
    channels = weighted.shape[-1]
    sources = a.gather(1, merged[..., None].expand(-1, -1, channels))
    b = b.scatter_add(1, partner.gather(1, merged)[..., None].expand(-1, -1, channels), sources)
    a = a.gather(1, kept[..., None].expand(-1, -1, channels))
    # protected tokens first, in their original order (A's kept prefix, B's first tokens), then the rest
    out = torch.cat([_interleave(a[:, :a_front], b[:, :b_front]), a[:, a_front:], b[:, b_front:]], dim=1)
    return out[..., :-1] / out[..., -1:], out[..., -1:]


def _interleave(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    parts = [(b if i % 2 else a)[:, i // 2: i // 2 + 1] for i in range(a.shape[1] + b.shape[1])]
    return torch.cat(parts, dim=1) if parts else a


class _ToMeLayer:
    """The patched forward of one block: attention (proportional), merge ``r`` tokens, MLP."""

    def __init__(self, shared: dict[str, Any], r: int, first: bool) -> None:
        self.shared, self.r, self.first = shared, r, first

    def __call__(self, layer: nn.Module, inner: Any, args: tuple, kwargs: dict) -> torch.Tensor:
        hidden = args[0] if args else kwargs["hidden_states"]
        if self.first:
            self.shared["size"] = None
        size = self.shared["size"]
        if size is None:
            size = torch.ones(*hidden.shape[:2], 1, dtype=hidden.dtype, device=hidden.device)
        mask = size.log()[:, None, None, :, 0] if self.shared["prop_attn"] else None  # [B, 1, 1, T]
        keys: list[torch.Tensor] = []
        hook = layer.attention.k_proj.register_forward_hook(lambda m, i, o: keys.append(o))
        try:
            attended, _ = layer.attention(layer.layernorm_before(hidden), mask)
        finally:
            hook.remove()
        hidden = hidden + layer.dropout(attended) if hasattr(layer, "dropout") else hidden + attended
        heads = layer.attention.num_attention_heads
        metric = keys[0].view(*keys[0].shape[:2], heads, -1).mean(dim=2)
        hidden, size = bipartite_merge(hidden, size, metric, self.r, self.shared["protected"])
        self.shared["size"] = size
        out = layer.mlp(layer.layernorm_after(hidden))
        return hidden + (layer.dropout(out) if hasattr(layer, "dropout") else out)


def apply_token_merging(model: nn.Module, r: int, prop_attn: bool = True, protected: int = 1) -> list[int]:
    """Patch every ViT block of ``model`` to merge ``r`` tokens after its attention; return tokens merged per layer.

    ``protected``: leading tokens never merged (1: the class token; 2: DeiT's class and distillation tokens).
    """
    layers = vit_layers(model)
    shared: dict[str, Any] = {"size": None, "prop_attn": prop_attn, "protected": protected}
    for i, layer in enumerate(layers):
        patch_forward(layer, PATCH_ATTRIBUTE, _ToMeLayer(shared, r, first=i == 0))
    return [r] * len(layers)
