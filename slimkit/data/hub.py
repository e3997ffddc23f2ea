"""Loaders for the reference's Hugging Face Hub datasets (need the network or a local ``datasets`` cache).

Each loader returns (train, val, test) with items in the format its collate function expects (columns
renamed where the hub names differ). ``hub_offline`` makes an ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE``
set after ``datasets`` was imported take effect, so offline runs fail at once instead of retrying for
half a minute; cached datasets still load.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from slimkit.data.utils import DictDataset, split_train_into_train_val_test
from slimkit.errors import DataError, MissingPackageError

_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


def offline_requested() -> bool:
    """Whether the environment asks for Hugging Face offline mode right now."""
    return any(os.environ.get(v, "").strip().upper() in {"1", "ON", "YES", "TRUE"} for v in _OFFLINE_VARS)


@contextmanager
def hub_offline() -> Iterator[None]:
    """Apply the offline environment variables to ``datasets`` / ``huggingface_hub`` for the duration."""
    if not offline_requested():
        yield
        return
    import datasets.config as ds_config
    import huggingface_hub.constants as hub_constants

    saved = [
        (mod, name, getattr(mod, name))
        for mod, name in (
            (ds_config, "HF_HUB_OFFLINE"),
            (ds_config, "HF_DATASETS_OFFLINE"),
            (hub_constants, "HF_HUB_OFFLINE"),
        )
        if hasattr(mod, name)
    ]
    try:
        for mod, name, _ in saved:
            setattr(mod, name, True)
        yield
    finally:
        for mod, name, value in saved:
            setattr(mod, name, value)


def load_hub_dataset(*args: Any, **kwargs: Any) -> Any:
    """``datasets.load_dataset(*args, **kwargs)`` honouring the offline variables at call time."""
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - datasets is in the data extra
        raise MissingPackageError("Hub datasets need the 'datasets' package: pip install 'slimkit[data]'.") from exc
    with hub_offline():
        return datasets.load_dataset(*args, **kwargs)


def _rename(dataset: Any, wanted: dict[str, Sequence[str]]) -> Any:
    """Rename the first present candidate column to each wanted name (e.g. CIFAR-10's ``img`` -> ``image``)."""
    columns = list(dataset.column_names or [])
    for target, candidates in wanted.items():
        if target in columns:
            continue
        found = next((c for c in candidates if c in columns), None)
        if found is None:
            raise DataError(f"Expected a column {target!r} (or one of {list(candidates)}); the dataset has {columns}.")
        dataset = dataset.rename_column(found, target)
        columns = list(dataset.column_names)
    return dataset


def _two_way(dataset: Any, seed: int, second_fraction: float = 0.1) -> tuple[Any, Any]:
    """Seeded split of one dataset into two disjoint parts (the second holds ``second_fraction``)."""
    first, second, _ = split_train_into_train_val_test(dataset, seed, val_fraction=second_fraction, test_fraction=0.0)
    return first, second


def _messages_to_text(example: dict[str, Any]) -> dict[str, str]:
    """Chat ``messages`` (list of {role, content}) -> one ``text`` string, one turn per paragraph."""
    return {"text": "\n\n".join(f"{m['role']}: {m['content']}" for m in example["messages"])}


def load_wikitext(seed: int = 42) -> tuple[Any, Any, Any]:
    """WikiText-103 (raw) train/validation/test, empty lines dropped."""
    splits = load_hub_dataset("Salesforce/wikitext", "wikitext-103-raw-v1", split=["train", "validation", "test"])
    return tuple(ds.filter(lambda row: bool(row["text"].strip())) for ds in splits)  # type: ignore[return-value]


def _load_chat(path: str, config: str | None, seed: int) -> tuple[Any, Any, Any]:
    args = (path, config) if config else (path,)
    train_full, test = load_hub_dataset(*args, split=["train", "test"])
    train, val = _two_way(train_full, seed)
    return tuple(ds.map(_messages_to_text) for ds in (train, val, test))  # type: ignore[return-value]


def load_smoltalk(seed: int = 42) -> tuple[Any, Any, Any]:
    """SmolTalk (everyday-conversations subset): chats flattened into ``text``."""
    return _load_chat("HuggingFaceTB/smoltalk", "everyday-conversations", seed)


def load_smolsmoltalk(seed: int = 42) -> tuple[Any, Any, Any]:
    """SmolSmolTalk: chats flattened into ``text``."""
    return _load_chat("HuggingFaceTB/smol-smoltalk", None, seed)


def load_pubchem(seed: int = 42) -> tuple[Any, Any, Any]:
    """PubChem10M molecules as SELFIES strings in ``text``."""
    dataset = _rename(load_hub_dataset("alxfgh/PubChem10M_SELFIES", split="train"), {"text": ["SELFIES"]})
    return split_train_into_train_val_test(dataset, seed)


def load_openassistant(seed: int = 42) -> tuple[Any, Any, Any]:
    """OpenAssistant Guanaco conversations (``text``)."""
    train_full, test = load_hub_dataset("timdettmers/openassistant-guanaco", split=["train", "test"])
    train, val = _two_way(train_full, seed)
    return train, val, test


def load_c4(seed: int = 42, val_size: int = 5000) -> tuple[Any, Any, Any]:
    """C4 English, streamed: train stream; validation stream cut into disjoint val (first ``val_size``) and test."""
    train = load_hub_dataset("allenai/c4", "en", split="train", streaming=True)
    validation = load_hub_dataset("allenai/c4", "en", split="validation", streaming=True)
    return train, validation.take(val_size), validation.skip(val_size)


def _image_classification(path: str, seed: int, test_split: str = "test") -> tuple[Any, Any, Any]:
    train_full, test = load_hub_dataset(path, split=["train", test_split])
    train_full, test = (_rename(ds, {"image": ["img"]}) for ds in (train_full, test))
    train, val = _two_way(train_full, seed)
    return train, val, test


def load_mnist(seed: int = 42) -> tuple[Any, Any, Any]:
    """MNIST 28x28 digits: train split into train/val, official test."""
    return _image_classification("ylecun/mnist", seed)


def load_cifar10(seed: int = 42) -> tuple[Any, Any, Any]:
    """CIFAR-10 (``img`` renamed to ``image``): train split into train/val, official test."""
    return _image_classification("uoft-cs/cifar10", seed)


def load_imagenet(seed: int = 42) -> tuple[Any, Any, Any]:
    """Tiny-ImageNet (200 classes, 64x64): train, and its validation split halved into val/test."""
    train, valid = load_hub_dataset("zh-plus/tiny-imagenet", split=["train", "valid"])
    val, test = _two_way(valid, seed, 0.5)
    return train, val, test


_IMAGE_TEXT_COLUMNS = {
    "image": ["img", "image_quality_dev", "image_simplified_dev", "image_quality_sd", "image_simplified_sd"],
    "text": ["caption", "prompt", "quality_prompt", "simplified_prompt", "TEXT"],
}


def load_laion256(seed: int = 42) -> tuple[Any, Any, Any]:
    """LAION subset (artwork split) with ``image`` / ``text`` columns, split 80/10/10."""
    dataset = _rename(load_hub_dataset("nannullna/laion_subset", split="artwork"), _IMAGE_TEXT_COLUMNS)
    return split_train_into_train_val_test(dataset, seed)


def load_openimage(seed: int = 42) -> tuple[Any, Any, Any]:
    """Open Image Preferences v1 (cleaned split): a generated image and its prompt, split 80/10/10."""
    dataset = load_hub_dataset("data-is-better-together/open-image-preferences-v1", split="cleaned")
    return split_train_into_train_val_test(_rename(dataset, _IMAGE_TEXT_COLUMNS), seed)


def load_coco(seed: int = 42, image_dir: str | None = None) -> tuple[Any, Any, Any]:
    """COCO 2017 captions (phiyodr/coco2017) with images read from a local COCO folder.

    The hub dataset holds only file names and captions; the images (train2017/, val2017/ from
    cocodataset.org, ~19 GB) must already be on disk under ``image_dir`` or ``$SLIMKIT_COCO_DIR``.
    """
    train, validation = load_hub_dataset("phiyodr/coco2017", split=["train", "validation"])
    root = image_dir or os.environ.get("SLIMKIT_COCO_DIR")
    if not root or not os.path.isdir(root):
        raise DataError(
            f"COCO needs its images on disk: got image_dir={root!r}. Download train2017.zip and val2017.zip "
            "from https://cocodataset.org, unzip them into one folder and pass image_dir=... "
            "(or set SLIMKIT_COCO_DIR)."
        )
    from PIL import Image

    def to_items(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        images = [Image.open(os.path.join(root, name)).convert("RGB") for name in batch["file_name"]]
        return {"image": images, "text": [captions[0] for captions in batch["captions"]]}

    val, test = _two_way(validation, seed, 0.5)
    return tuple(ds.with_transform(to_items) for ds in (train, val, test))  # type: ignore[return-value]


def load_commonvoice(seed: int = 42) -> tuple[Any, Any, Any]:
    """Common Voice 1.0 English: ``audio`` (decoded waveform dict), ``path`` and ``sentence``."""
    splits = load_hub_dataset("mozilla-foundation/common_voice_1_0", "en", split=["train", "validation", "test"])
    return splits[0], splits[1], splits[2]


def load_aipodcast(seed: int = 42) -> tuple[Any, Any, Any]:
    """One podcast recording (reach-vb/random-audios) as a single item, used for train, val and test."""
    from huggingface_hub import hf_hub_download

    with hub_offline():
        path = hf_hub_download("reach-vb/random-audios", "sam_altman_lex_podcast_367.flac", repo_type="dataset")
    dataset = DictDataset({"audio": [None], "path": [path], "sentence": [""]})
    return dataset, dataset, dataset


def load_polyglot(seed: int = 42) -> tuple[Any, Any, Any]:
    """Polyglot-or-Not fact completion (English): ``stem`` -> ``question``, ``true`` -> ``answer``."""
    dataset = load_hub_dataset("Polyglot-or-Not/Fact-Completion", split="English")
    dataset = _rename(dataset, {"question": ["stem"], "answer": ["true"]})
    return split_train_into_train_val_test(dataset, seed)
