"""Built-in datasets that ship with the environment, so they work offline.

- ``Digits``: scikit-learn's 1,797 real 8x8 handwritten digits (image classification).
- ``PyDocText``: the English prose of Python's own ``pydoc_data.topics`` (~465k characters; text generation,
  perplexity and calibration text for language models).
"""

from __future__ import annotations

from typing import Any

import torch

from slimkit.data.images import resize_short_side, to_chw_float
from slimkit.data.utils import DictDataset, split_train_into_train_val_test
from slimkit.errors import DataError, MissingPackageError

PYDOC_SPLIT_FRACTIONS = {"test": 0.1, "val": 0.1}  # share of the characters; train gets the rest
_BLOCK_SPLITS = {"test": "test", "calibration": "train", "train": "train", "validation": "val", "val": "val"}


def load_digits_splits(seed: int = 42) -> tuple[DictDataset, Any, Any]:
    """Digits as (train, val, test): items ``{"image": float32 [1, 8, 8] in [0, 1], "label": int}``.

    Pixel values 0..16 are divided by 16. The split is ``split_train_into_train_val_test`` with ``seed``
    (80/10/10: 1,437 / 180 / 180 items for the default fractions).
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:  # pragma: no cover - sklearn is in the data extra
        raise MissingPackageError("The 'Digits' dataset needs scikit-learn: pip install 'slimkit[data]'.") from exc
    bunch = load_digits()
    images = torch.from_numpy(bunch.images).float().div_(16.0).unsqueeze(1)
    dataset = DictDataset({"image": list(images), "label": [int(y) for y in bunch.target]})
    return split_train_into_train_val_test(dataset, seed=seed)


#: the offline photos of ``Photos``: scikit-image's sample photos (real camera images of everyday subjects)
PHOTO_NAMES: tuple[str, ...] = ("chelsea", "coffee", "astronaut", "rocket", "camera", "cat", "coins", "page",
                                "moon", "immunohistochemistry", "hubble_deep_field", "retina")


def _ten_crops(image: torch.Tensor, size: int = 224, resize: int = 256) -> list[torch.Tensor]:
    """Centre and corner crops of ``image`` ([3, H, W] in [0, 1]) after resizing its shorter side, and mirrors."""
    image = resize_short_side(image, resize, least=size)
    h, w = image.shape[1:]
    corners = [((h - size) // 2, (w - size) // 2), (0, 0), (0, w - size), (h - size, 0), (h - size, w - size)]
    crops = [image[:, t : t + size, left : left + size].clamp(0, 1).contiguous() for t, left in corners]
    return crops + [c.flip(-1) for c in crops]


def load_photo_splits(seed: int = 42) -> tuple[DictDataset, DictDataset, DictDataset]:
    """Photos as (train, val, test): ten 224x224 crops of each offline photo, ``{"image", "label": photo index}``.

    The split is by photo (every fourth photo is test, the one before it validation), so calibration crops
    never come from a held-out photo. Images are RGB floats in [0, 1]; the collate normalises them with the
    ImageNet mean and std. ``seed`` is accepted for the common loader signature (the split is fixed).
    """
    try:
        from skimage import data as skimage_data
    except ImportError as exc:  # pragma: no cover - scikit-image is in the models extra
        raise MissingPackageError("The 'Photos' dataset needs scikit-image: pip install scikit-image.") from exc
    splits: tuple[dict[str, list], ...] = tuple({"image": [], "label": []} for _ in range(3))
    for index, name in enumerate(PHOTO_NAMES):
        array = getattr(skimage_data, name)()
        image = to_chw_float(array)
        image = image.expand(3, -1, -1) if image.shape[0] == 1 else image[:3]
        split = 2 if index % 4 == 3 else 1 if index % 4 == 2 else 0
        for crop in _ten_crops(image):
            splits[split]["image"].append(crop)
            splits[split]["label"].append(index)
    train, val, test = (DictDataset(s) for s in splits)
    return train, val, test


def _topics() -> dict[str, str]:
    from pydoc_data.topics import topics

    return dict(topics)


def pydoc_split_topics(seed: int = 42) -> dict[str, list[str]]:
    """Assign every pydoc topic (a whole document) to exactly one of ``train`` / ``val`` / ``test``.

    Topics are visited in a seeded random order; ``test`` takes topics until it holds 10% of all
    characters, then ``val`` until it holds 10%, and ``train`` gets the rest. Splitting by whole
    documents keeps the splits' text disjoint, so calibration text never leaks into evaluation text.
    """
    topics = _topics()
    names = sorted(topics)
    order = torch.randperm(len(names), generator=torch.Generator().manual_seed(int(seed))).tolist()
    total = sum(len(text) for text in topics.values())
    splits: dict[str, list[str]] = {"train": [], "val": [], "test": []}
    chars = {"val": 0, "test": 0}
    for index in order:
        name = names[index]
        target = next((s for s in ("test", "val") if chars[s] < PYDOC_SPLIT_FRACTIONS[s] * total), "train")
        splits[target].append(name)
        if target != "train":
            chars[target] += len(topics[name])
    return splits


def _chunks(text: str, chunk_chars: int) -> list[str]:
    """Pack consecutive paragraphs of ``text`` into chunks of at most ``chunk_chars`` characters.

    A single paragraph longer than ``chunk_chars`` stays one chunk (collate functions truncate).
    """
    chunks: list[str] = []
    current = ""
    for paragraph in (p.strip() for p in text.split("\n\n")):
        if not paragraph:
            continue
        candidate = f"{current}\n\n{paragraph}" if current else paragraph
        if current and len(candidate) > chunk_chars:
            chunks.append(current)
            current = paragraph
        else:
            current = candidate
    if current:
        chunks.append(current)
    return chunks


def load_pydoc_text_splits(seed: int = 42, chunk_chars: int = 2000) -> tuple[DictDataset, DictDataset, DictDataset]:
    """PyDocText as (train, val, test) of items ``{"text": str}``.

    Documents are split by ``pydoc_split_topics`` (disjoint text), then each document is cut into
    paragraph-aligned chunks of up to ``chunk_chars`` characters so a batch holds many short samples.
    """
    if isinstance(chunk_chars, bool) or not isinstance(chunk_chars, int) or chunk_chars < 1:
        raise DataError(f"chunk_chars must be a positive int; got {chunk_chars!r}.")
    topics, assignment = _topics(), pydoc_split_topics(seed)
    parts = []
    for split in ("train", "val", "test"):
        texts = [chunk for name in assignment[split] for chunk in _chunks(topics[name], chunk_chars)]
        parts.append(DictDataset({"text": texts}))
    return parts[0], parts[1], parts[2]


def _separator_ids(tokenizer: Any) -> list[int]:
    """Token placed between documents in a block stream: EOS, else SEP, else nothing."""
    ids = (getattr(tokenizer, attr, None) for attr in ("eos_token_id", "sep_token_id"))
    return next(([value] for value in ids if isinstance(value, int)), [])


def pydoc_token_stream(tokenizer: Any, split: str = "test", seed: int = 42) -> list[int]:
    """All tokens of one PyDocText split: its documents tokenized and joined by an EOS/SEP token."""
    if split not in _BLOCK_SPLITS:
        raise DataError(f"Unknown PyDocText split {split!r}; valid: {', '.join(sorted(_BLOCK_SPLITS))}.")
    if tokenizer is None or not callable(tokenizer):
        raise DataError("pydoc_text_blocks needs a tokenizer (a Hugging Face tokenizer or any callable like one).")
    topics = _topics()
    names = pydoc_split_topics(seed)[_BLOCK_SPLITS[split]]
    encoded = tokenizer([topics[name] for name in names], add_special_tokens=False, verbose=False)["input_ids"]
    separator = _separator_ids(tokenizer)
    stream: list[int] = []
    for ids in encoded:
        if stream:
            stream.extend(separator)
        stream.extend(int(i) for i in ids)
    return stream


def pydoc_text_blocks(
    tokenizer: Any, n_blocks: int, block_len: int, split: str = "test", seed: int = 42
) -> torch.Tensor:
    """Return ``n_blocks`` contiguous, non-overlapping token blocks of PyDocText as a LongTensor ``[n, block_len]``.

    ``split="test"`` reads the test documents (for perplexity), ``split="calibration"`` the training
    documents (for quantizer calibration), ``"validation"`` the validation documents. The splits hold
    disjoint whole documents (``pydoc_split_topics``), so calibration and evaluation text never overlap.
    Blocks are cut from the split's token stream from its start, so the result is deterministic.
    """
    for label, value in (("n_blocks", n_blocks), ("block_len", block_len)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise DataError(f"{label} must be a positive int; got {value!r}.")
    stream = pydoc_token_stream(tokenizer, split, seed)
    available = len(stream) // block_len
    if n_blocks > available:
        raise DataError(
            f"The PyDocText {split!r} split has {len(stream)} tokens with this tokenizer: {available} blocks of "
            f"{block_len}, fewer than the {n_blocks} asked for. Ask for at most {available} blocks or "
            "shorter blocks."
        )
    return torch.tensor(stream[: n_blocks * block_len], dtype=torch.long).view(n_blocks, block_len)
