"""Packed (padding-free) batching for sentence encoders: many sentences as ONE sequence, no padding at all.

Padding a batch of sentences of 9-92 tokens to a common length spends most of a forward on pad tokens. Packing
concatenates the batch's sentences (each cut to its real tokens) into one row: ``position_ids`` restart at 0 for
each sentence, ``token_type_ids`` are carried, and an additive block-diagonal attention mask ``[1, 1, L, L]``
(0 within a sentence, the dtype's minimum across sentences) keeps every token attending only to its own sentence.
The linear layers then run on exactly the real tokens. With the ``sdpa`` attention, attention itself runs sentence
by sentence instead (no mask; see :func:`enable_segmented_attention`), which skips the cross-sentence blocks the
mask would only zero. The last hidden state is split back per sentence and pooled
as the model pools (mean over the sentence's tokens, then L2-normalised, for :class:`SentenceEncoder`), so each
sentence's embedding equals its unbatched one up to float rounding.

Attention over a pack costs the square of its length, so sentences are packed in order into packs of at most
``max_pack_tokens`` tokens (a longer sentence gets a pack of its own).

Which models pack: a :class:`SentenceEncoder` whose ``forward`` is still its own (not replaced by a compiler),
wrapping a bidirectional (not decoder) Hugging Face encoder with absolute position embeddings whose ``forward``
takes ``position_ids``, using the ``sdpa`` or ``eager`` attention (both take a 4D additive mask as given).
A call packs when its ``attention_mask`` (if any) is right-padded: ones then zeros in every row.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from slimkit.zoo.minilm import SentenceEncoder

#: ``pack`` settings: "auto" packs when the model supports it, "on" requires it (an error otherwise), "off" never.
PACK_MODES = ("auto", "off", "on")
#: attention implementations that apply a 4D additive mask as given
_MASKED_ATTENTION = ("sdpa", "eager")

#: the attention implementation :func:`enable_segmented_attention` installs (sdpa, or per sentence when told)
SEGMENTED_ATTENTION = "slimkit_segmented_sdpa"
#: the keyword argument that carries the sentence lengths of a pack down to the attention function
LENGTHS_KWARG = "slimkit_packed_lengths"

#: one packed sentence: its real token ids and token type ids, 1D
Segment = tuple[torch.Tensor, torch.Tensor | None]


def pack_reason(model: Any) -> str | None:
    """Why ``model`` cannot be packed (a sentence naming what is missing), or ``None`` when it can."""
    if not isinstance(model, SentenceEncoder):
        return (f"packing needs a sentence encoder whose pooling slimkit knows (slimkit.zoo.minilm.SentenceEncoder: "
                f"mean pooling + L2 norm); got {type(model).__name__}")
    encoder = model.bert
    config = getattr(encoder, "config", None)
    if config is None or getattr(config, "is_decoder", False):
        return "packing needs a bidirectional encoder with a Hugging Face config; this one is a decoder or has none"
    if getattr(config, "position_embedding_type", "absolute") != "absolute":
        return f"packing needs absolute position embeddings; got {config.position_embedding_type!r}"
    attention = getattr(config, "_attn_implementation", None) or "eager"
    if attention not in (*_MASKED_ATTENTION, SEGMENTED_ATTENTION):
        return f"packing needs attention {' or '.join(_MASKED_ATTENTION)} (a 4D mask as given); got {attention!r}"
    try:
        parameters = inspect.signature(encoder.forward).parameters
    except (TypeError, ValueError):
        parameters = {}
    if "position_ids" not in parameters:
        return f"packing needs an encoder forward that takes position_ids; {type(encoder).__name__}.forward does not"
    return None


def is_own_forward(model: Any, inner: Callable[..., Any]) -> bool:
    """True when ``inner`` is the model class's own forward (not a compiled or otherwise replaced one)."""
    return getattr(inner, "__self__", None) is model and getattr(inner, "__func__", None) is type(model).forward


def _segmented_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, dropout: float = 0.0,
                    **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Transformers' sdpa attention; given :data:`LENGTHS_KWARG`, one SDPA per sentence of the packed sequence.

    ``dropout`` may come by position: kvpress, once imported, wraps every registered attention function so.
    """
    lengths = kwargs.pop(LENGTHS_KWARG, None)
    if lengths is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, **kwargs)
    parts = [F.scaled_dot_product_attention(q, k, v, scale=kwargs.get("scaling"))
             for q, k, v in zip(query.split(lengths, 2), key.split(lengths, 2), value.split(lengths, 2), strict=True)]
    return torch.cat(parts, 2).transpose(1, 2).contiguous(), None


def enable_segmented_attention(config: Any) -> bool:
    """Switch a Hugging Face config from ``sdpa`` to :data:`SEGMENTED_ATTENTION`; True when it now uses it.

    The new implementation is transformers' own sdpa (and sdpa mask) on every call but a packed one, which passes
    the sentence lengths as :data:`LENGTHS_KWARG`. Other implementations are left as they are (the packed forward
    then uses a block-diagonal mask). The name is not written to a saved config.json.
    """
    if config._attn_implementation == "sdpa":
        from transformers import AttentionInterface, AttentionMaskInterface
        from transformers.masking_utils import sdpa_mask

        AttentionInterface.register(SEGMENTED_ATTENTION, _segmented_sdpa)
        AttentionMaskInterface.register(SEGMENTED_ATTENTION, sdpa_mask)
        config._attn_implementation = SEGMENTED_ATTENTION
    return config._attn_implementation == SEGMENTED_ATTENTION


def block_diagonal_mask(lengths: list[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Additive mask ``[1, 1, L, L]``: 0 where two tokens belong to the same sentence, ``finfo(dtype).min`` else."""
    segment = torch.repeat_interleave(torch.arange(len(lengths), device=device),
                                      torch.tensor(lengths, device=device))
    same = segment[:, None] == segment[None, :]
    mask = torch.zeros(same.shape, dtype=dtype, device=device).masked_fill_(~same, torch.finfo(dtype).min)
    return mask[None, None]


def split_packs(lengths: list[int], max_pack_tokens: int) -> list[list[int]]:
    """Indices of consecutive sentences in packs of at most ``max_pack_tokens`` tokens (a longer one alone)."""
    packs: list[list[int]] = []
    current: list[int] = []
    total = 0
    for i, n in enumerate(lengths):
        if current and total + n > max_pack_tokens:
            packs.append(current)
            current, total = [], 0
        current.append(i)
        total += n
    return [*packs, current] if current else packs


class Packer:
    """Runs the sentences of several calls to a :class:`SentenceEncoder` as packed sequences (see the module doc).

    ``segments(args, kwargs)`` gives a call's sentences (``None`` when the call cannot pack); ``run`` gives each
    call's output, ``[rows, hidden]`` unit-norm embeddings as the model's own forward returns. ``segmented=False``
    keeps the block-diagonal mask even where per-sentence attention is available (for comparisons).
    """

    def __init__(self, model: SentenceEncoder, max_pack_tokens: int = 512, segmented: bool = True) -> None:
        reason = pack_reason(model)
        if reason is not None:
            raise TypeError(reason)
        if max_pack_tokens < 1:
            raise ValueError(f"max_pack_tokens must be >= 1; got {max_pack_tokens}.")
        self.model, self.max_pack_tokens = model, max_pack_tokens
        self._signature = inspect.signature(type(model).forward)
        weight = model.bert.get_input_embeddings().weight
        self.dtype = weight.dtype if weight.dtype.is_floating_point else torch.float32
        self.segmented = segmented and enable_segmented_attention(model.bert.config)

    @property
    def device(self) -> torch.device:
        """Where the encoder's weights are: packs are built there (inputs follow the model)."""
        return self.model.bert.get_input_embeddings().weight.device

    def segments(self, args: tuple, kwargs: dict) -> list[Segment] | None:
        """Each row's real tokens (ids, token types) when the call is right-padded token ids; else ``None``."""
        try:
            bound = self._signature.bind(self.model, *args, **kwargs).arguments
        except TypeError:
            return None
        ids, mask, types = bound.get("input_ids"), bound.get("attention_mask"), bound.get("token_type_ids")
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype.is_floating_point:
            return None
        rows, width = ids.shape
        for extra in (mask, types):
            if extra is not None and (not isinstance(extra, torch.Tensor) or tuple(extra.shape) != (rows, width)):
                return None
        if mask is None:
            lengths = [width] * rows
        else:
            lengths = mask.sum(1).tolist()
            right_padded = torch.arange(width, device=mask.device)[None, :] < mask.sum(1, keepdim=True)
            if not torch.equal(mask != 0, right_padded) or min(lengths) < 1:
                return None
        return [(ids[r, :n], None if types is None else types[r, :n]) for r, n in enumerate(lengths)]

    def run(self, calls: list[list[Segment]]) -> list[torch.Tensor]:
        """Embed every call's sentences in packs; one ``[rows, hidden]`` tensor per call, in call order."""
        flat = [segment for call in calls for segment in call]
        pooled = torch.cat([self._pack([flat[i] for i in pack])
                            for pack in split_packs([len(ids) for ids, _ in flat], self.max_pack_tokens)])
        return list(pooled.split([len(call) for call in calls]))

    def _pack(self, segments: list[Segment]) -> torch.Tensor:
        """One packed forward of ``segments``, on the encoder's device whatever device the callers' ids are on."""
        lengths = [len(ids) for ids, _ in segments]
        device = self.device
        ids = torch.cat([ids.to(device) for ids, _ in segments])[None]
        positions = torch.cat([torch.arange(n, device=device) for n in lengths])[None]
        types = None
        if any(t is not None for _, t in segments):
            types = torch.cat([(torch.zeros_like(i) if t is None else t).to(device) for i, t in segments])[None]
        extra: dict[str, Any] = {}
        if self.segmented:
            extra[LENGTHS_KWARG] = lengths
        elif len(lengths) > 1:
            extra["attention_mask"] = block_diagonal_mask(lengths, self.dtype, device)
        states = self.model.bert(input_ids=ids, token_type_ids=types, position_ids=positions,
                                 **extra).last_hidden_state[0]
        segment = torch.repeat_interleave(torch.arange(len(lengths), device=device), torch.tensor(lengths,
                                                                                                  device=device))
        sums = torch.zeros(len(lengths), states.shape[-1], dtype=states.dtype, device=device)
        sums.index_add_(0, segment, states)
        counts = torch.tensor(lengths, dtype=states.dtype, device=device)[:, None]
        return F.normalize(sums / counts, p=2, dim=1)


__all__ = ["LENGTHS_KWARG", "PACK_MODES", "SEGMENTED_ATTENTION", "Packer", "block_diagonal_mask",
           "enable_segmented_attention", "is_own_forward", "pack_reason", "split_packs"]
