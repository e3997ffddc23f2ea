"""The table of built-in dataset ids: where each comes from, its task, collate function and defaults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slimkit.data import builtin, hub
from slimkit.errors import DataError, closest


@dataclass(frozen=True)
class DatasetSpec:
    """One built-in dataset id: ``loader(seed=..., **options) -> (train, val, test)``."""

    task: str
    collate: str
    loader: Callable[..., tuple[Any, Any, Any]]
    source: str
    offline: bool = False  # True when it loads from packages installed locally (no hub)
    collate_kwargs: dict[str, Any] = field(default_factory=dict)


_HF = "Hugging Face Hub"
BUILTIN_DATASETS: dict[str, DatasetSpec] = {
    "Digits": DatasetSpec(
        "image_classification",
        "image_classification_collate",
        builtin.load_digits_splits,
        "scikit-learn load_digits()",
        offline=True,
    ),
    "Photos": DatasetSpec(
        "image_classification",
        "image_classification_collate",
        builtin.load_photo_splits,
        "scikit-image's sample photos, ten crops each",
        offline=True,
        collate_kwargs={"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)},
    ),
    "PyDocText": DatasetSpec(
        "text_generation",
        "text_generation_collate",
        builtin.load_pydoc_text_splits,
        "Python's pydoc_data.topics",
        offline=True,
        collate_kwargs={"max_seq_len": 512},
    ),
    "WikiText": DatasetSpec(
        "text_generation",
        "text_generation_collate",
        hub.load_wikitext,
        f"{_HF} Salesforce/wikitext (wikitext-103-raw-v1)",
    ),
    "SmolTalk": DatasetSpec(
        "text_generation", "text_generation_collate", hub.load_smoltalk, f"{_HF} HuggingFaceTB/smoltalk"
    ),
    "SmolSmolTalk": DatasetSpec(
        "text_generation", "text_generation_collate", hub.load_smolsmoltalk, f"{_HF} HuggingFaceTB/smol-smoltalk"
    ),
    "PubChem": DatasetSpec(
        "text_generation", "text_generation_collate", hub.load_pubchem, f"{_HF} alxfgh/PubChem10M_SELFIES"
    ),
    "OpenAssistant": DatasetSpec(
        "text_generation",
        "text_generation_collate",
        hub.load_openassistant,
        f"{_HF} timdettmers/openassistant-guanaco",
    ),
    "C4": DatasetSpec("text_generation", "text_generation_collate", hub.load_c4, f"{_HF} allenai/c4 (en, streamed)"),
    "LAION256": DatasetSpec(
        "image_generation",
        "image_generation_collate",
        hub.load_laion256,
        f"{_HF} nannullna/laion_subset",
        collate_kwargs={"img_size": 512},
    ),
    "OpenImage": DatasetSpec(
        "image_generation",
        "image_generation_collate",
        hub.load_openimage,
        f"{_HF} data-is-better-together/open-image-preferences-v1",
        collate_kwargs={"img_size": 1024},
    ),
    "COCO": DatasetSpec(
        "image_generation",
        "image_generation_collate",
        hub.load_coco,
        f"{_HF} phiyodr/coco2017",
        collate_kwargs={"img_size": 512},
    ),
    "ImageNet": DatasetSpec(
        "image_classification",
        "image_classification_collate",
        hub.load_imagenet,
        f"{_HF} zh-plus/tiny-imagenet",
        collate_kwargs={"img_size": 224, "channels": 3},
    ),
    "MNIST": DatasetSpec(
        "image_classification",
        "image_classification_collate",
        hub.load_mnist,
        f"{_HF} ylecun/mnist",
        collate_kwargs={"img_size": 28},
    ),
    "CIFAR10": DatasetSpec(
        "image_classification",
        "image_classification_collate",
        hub.load_cifar10,
        f"{_HF} uoft-cs/cifar10",
        collate_kwargs={"img_size": 32, "channels": 3},
    ),
    "CommonVoice": DatasetSpec(
        "audio_processing",
        "audio_processing_collate",
        hub.load_commonvoice,
        f"{_HF} mozilla-foundation/common_voice_1_0 (en)",
    ),
    "AIPodcast": DatasetSpec(
        "audio_processing", "audio_processing_collate", hub.load_aipodcast, f"{_HF} reach-vb/random-audios"
    ),
    "Polyglot": DatasetSpec(
        "question_answering",
        "question_answering_collate",
        hub.load_polyglot,
        f"{_HF} Polyglot-or-Not/Fact-Completion (English)",
    ),
}


def list_datasets() -> dict[str, str]:
    """Built-in dataset ids mapped to their task (e.g. ``{"Digits": "image_classification", ...}``)."""
    return {name: spec.task for name, spec in BUILTIN_DATASETS.items()}


def lookup(dataset_id: str) -> tuple[str, DatasetSpec]:
    """The canonical id and spec for ``dataset_id`` (case-insensitive); a DataError lists valid ids."""
    if isinstance(dataset_id, str):
        if dataset_id in BUILTIN_DATASETS:
            return dataset_id, BUILTIN_DATASETS[dataset_id]
        folded = {name.lower(): name for name in BUILTIN_DATASETS}
        if dataset_id.lower() in folded:
            name = folded[dataset_id.lower()]
            return name, BUILTIN_DATASETS[name]
    offline = [name for name, spec in BUILTIN_DATASETS.items() if spec.offline]
    raise DataError(
        f"Unknown dataset id {dataset_id!r}.{closest(str(dataset_id), BUILTIN_DATASETS)} Valid ids: "
        f"{', '.join(BUILTIN_DATASETS)} (offline: {', '.join(offline)}). For your own data pass "
        "(train, val, test) with collate_fn=..., or a DataModule."
    )
