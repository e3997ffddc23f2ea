"""Collate functions: turn a list of dataset items (dicts) into a model-ready batch.

Names and item formats follow Pruna's table (see docs): a dataset used with a collate function must yield
dict items with the fields listed in ``COLLATE_FORMATS``. ``resolve_collate`` looks a name up and
``check_item_fields`` validates an item up front, so a wrong dataset fails when the DataModule is built,
not deep inside a DataLoader worker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from slimkit.data.images import stack_images
from slimkit.errors import DataError, closest

IGNORE_INDEX = -100  # label value ignored by torch / Hugging Face cross-entropy losses


def _pad_id(tokenizer: Any) -> int:
    """Token id used for padding: the pad token, else the end-of-sequence token, else 0."""
    for attr in ("pad_token_id", "eos_token_id"):
        value = getattr(tokenizer, attr, None)
        if isinstance(value, int):
            return value
    return 0


def _tokenize(tokenizer: Any, texts: list[str], max_length: int) -> list[list[int]]:
    """Token ids of each text, truncated to ``max_length`` (tokenizer's own special tokens included)."""
    if tokenizer is None:
        raise DataError("This collate function needs a tokenizer; pass tokenizer=... to the DataModule.")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise DataError(f"max_seq_len must be a positive int; got {max_length!r}.")
    encoded = tokenizer(texts, truncation=True, max_length=max_length, verbose=False)
    return [list(ids) for ids in encoded["input_ids"]]


def _pad(rows: list[list[int]], length: int, value: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id rows to ``length``; returns (ids [B, length], mask [B, length] True on real tokens)."""
    ids = torch.full((len(rows), length), value, dtype=torch.long)
    mask = torch.zeros((len(rows), length), dtype=torch.bool)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row[:length], dtype=torch.long)
        mask[i, : len(row)] = True
    return ids, mask


def text_generation_collate(
    batch: list[Mapping[str, Any]], tokenizer: Any, max_seq_len: int = 512
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal-LM batch from items ``{"text": str}``: ``(input_ids [B, L], labels [B, L])`` with ``L = max_seq_len``.

    Each text is tokenized and truncated to ``max_seq_len + 1`` tokens and right-padded; ``input_ids`` are
    tokens ``0..L-1`` and ``labels`` tokens ``1..L`` (the next token at each position). Padding positions
    in ``labels`` are ``-100`` so cross-entropy ignores them; padding in ``input_ids`` uses the pad
    (else EOS) token and, being on the right, never affects real positions of a causal model.
    """
    rows = _tokenize(tokenizer, [str(item["text"]) for item in batch], max_seq_len + 1)
    ids, mask = _pad(rows, max_seq_len + 1, _pad_id(tokenizer))
    labels = ids.masked_fill(~mask, IGNORE_INDEX)
    return ids[:, :-1].contiguous(), labels[:, 1:].contiguous()


def question_answering_collate(
    batch: list[Mapping[str, Any]], tokenizer: Any, max_seq_len: int = 512
) -> tuple[torch.Tensor, torch.Tensor]:
    """QA batch from items ``{"question": str, "answer": str}``: ``(question_ids, answer_ids)``, each ``[B, L]``.

    Both are tokenized, truncated to ``max_seq_len`` and right-padded with the pad (else EOS) token.
    """
    pad = _pad_id(tokenizer)
    questions = _tokenize(tokenizer, [str(item["question"]) for item in batch], max_seq_len)
    answers = _tokenize(tokenizer, [str(item["answer"]) for item in batch], max_seq_len)
    return _pad(questions, max_seq_len, pad)[0], _pad(answers, max_seq_len, pad)[0]


def _label(value: Any) -> int:
    """One class label as a Python int (accepts ints, 0-d tensors and NumPy scalars)."""
    if isinstance(value, (torch.Tensor, np.ndarray, np.generic)):
        count = value.numel() if isinstance(value, torch.Tensor) else np.size(value)
        if count != 1:
            raise DataError(f"A label must be a single int; got an array of shape {tuple(value.shape)}.")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise DataError(f"A label must be an int class index; got {value!r} ({type(value).__name__}).")
    return int(value)


def image_classification_collate(
    batch: list[Mapping[str, Any]],
    img_size: int | None = None,
    channels: int | None = None,
    mean: tuple[float, ...] | None = None,
    std: tuple[float, ...] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Classification batch from items ``{"image": PIL | ndarray | Tensor, "label": int}``.

    Returns ``(images float32 [B, C, H, W] in [0, 1] (or normalised by mean/std), labels int64 [B])``.
    ``img_size`` resizes the shorter side and centre-crops to a square; without it all images must share
    one size.
    """
    images = stack_images([item["image"] for item in batch], img_size, channels, mean, std)
    labels = torch.tensor([_label(item["label"]) for item in batch], dtype=torch.long)
    return images, labels


def image_generation_collate(
    batch: list[Mapping[str, Any]], img_size: int | None = None, channels: int | None = None
) -> tuple[torch.Tensor, list[str]]:
    """Text-to-image batch from items ``{"image": PIL | ndarray | Tensor, "text": str}``: ``(images, texts)``.

    ``images`` is float32 ``[B, C, H, W]`` in [0, 1]; ``texts`` the prompts as a list of strings.
    """
    images = stack_images([item["image"] for item in batch], img_size, channels)
    return images, [str(item["text"]) for item in batch]


def _audio_input(item: Mapping[str, Any]) -> torch.Tensor | str:
    """The waveform of one audio item as a float tensor, or its file path when no waveform is loaded."""
    audio, path = item.get("audio"), item.get("path")
    if isinstance(audio, Mapping):  # Hugging Face Audio feature: {"array", "sampling_rate", "path"}
        audio, path = audio.get("array"), path or audio.get("path")
    if isinstance(audio, torch.Tensor):
        return audio.detach().float()
    if isinstance(audio, (np.ndarray, list)):
        return torch.as_tensor(np.asarray(audio, dtype=np.float32))
    if audio is not None:
        raise DataError(
            f"An 'audio' value must be a tensor, an array, a Hugging Face audio dict or None; "
            f"got {type(audio).__name__}."
        )
    if not path:
        raise DataError("An audio item has neither a waveform in 'audio' nor a file in 'path'; give one of them.")
    return str(path)


def audio_processing_collate(batch: list[Mapping[str, Any]]) -> tuple[list[torch.Tensor | str], list[str]]:
    """Audio batch from items ``{"audio": Tensor | None, "path": str | None, "sentence": str}``.

    Returns ``(inputs, sentences)``: each input is the float waveform when ``audio`` holds one (a tensor,
    array, or Hugging Face ``{"array", ...}`` dict), otherwise the file path for the model's processor.
    Waveforms differ in length, so they are returned as a list rather than stacked.
    """
    return [_audio_input(item) for item in batch], [str(item["sentence"]) for item in batch]


COLLATE_FUNCTIONS: dict[str, Callable[..., Any]] = {f.__name__: f for f in (
    audio_processing_collate, image_classification_collate, image_generation_collate, question_answering_collate,
    text_generation_collate)}

# name -> (fields every item needs, groups of which at least one field is needed, human-readable format)
COLLATE_FORMATS: dict[str, tuple[tuple[str, ...], tuple[tuple[str, ...], ...], str]] = {
    "audio_processing_collate": (
        ("sentence",),
        (("audio", "path"),),
        '{"audio": Optional[torch.Tensor], "path": Optional[str], "sentence": str}',
    ),
    "image_classification_collate": (("image", "label"), (), '{"image": PIL.Image.Image, "label": int}'),
    "image_generation_collate": (("image", "text"), (), '{"image": PIL.Image.Image, "text": str}'),
    "question_answering_collate": (("question", "answer"), (), '{"question": str, "answer": str}'),
    "text_generation_collate": (("text",), (), '{"text": str}'),
}

TOKENIZER_COLLATES = frozenset({"text_generation_collate", "question_answering_collate"})


def resolve_collate(name: str) -> Callable[..., Any]:
    """The collate function registered as ``name``; a DataError lists the valid names otherwise."""
    try:
        return COLLATE_FUNCTIONS[name]
    except (KeyError, TypeError):
        raise DataError(
            f"Unknown collate function {name!r}.{closest(str(name), COLLATE_FUNCTIONS)} "
            f"Valid names: {', '.join(sorted(COLLATE_FUNCTIONS))}; or pass your own callable(batch) -> batch."
        ) from None


def check_item_fields(name: str, fields: list[str] | None, where: str) -> None:
    """Raise a DataError when items with ``fields`` lack what collate function ``name`` needs."""
    if fields is None or name not in COLLATE_FORMATS:
        return
    required, any_of, fmt = COLLATE_FORMATS[name]
    missing = [field for field in required if field not in fields]
    missing += [" or ".join(group) for group in any_of if not any(field in fields for field in group)]
    if missing:
        raise DataError(
            f"The {where} items lack field(s) {', '.join(repr(m) for m in missing)} that {name!r} needs; "
            f"their fields are {sorted(fields)}. Items must be dicts like {fmt}: rename columns "
            "(e.g. dataset.rename_column('img', 'image')) or pass a collate_fn callable that reads your format."
        )
