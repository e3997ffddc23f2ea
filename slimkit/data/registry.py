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
    loader: Callable[..., tuple[Any, Any, Any]]
    source: str
    offline: bool = False  # True when it loads from packages installed locally (no hub)
    collate_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def collate(self) -> str:
        """The name of the collate function: each task has its own (``<task>_collate``)."""
        return f"{self.task}_collate"


def _hub(task: str, loader: Callable[..., tuple[Any, Any, Any]], repo: str, **collate_kwargs: Any) -> DatasetSpec:
    return DatasetSpec(task, loader, f"Hugging Face Hub {repo}", collate_kwargs=collate_kwargs)


_TEXT, _IMAGE, _GENERATION = "text_generation", "image_classification", "image_generation"
BUILTIN_DATASETS: dict[str, DatasetSpec] = {
    "Digits": DatasetSpec(_IMAGE, builtin.load_digits_splits, "scikit-learn load_digits()", offline=True),
    "Photos": DatasetSpec(_IMAGE, builtin.load_photo_splits, "scikit-image's sample photos, ten crops each",
                          offline=True, collate_kwargs={"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}),
    "PyDocText": DatasetSpec(_TEXT, builtin.load_pydoc_text_splits, "Python's pydoc_data.topics", offline=True,
                             collate_kwargs={"max_seq_len": 512}),
    "WikiText": _hub(_TEXT, hub.load_wikitext, "Salesforce/wikitext (wikitext-103-raw-v1)"),
    "SmolTalk": _hub(_TEXT, hub.load_smoltalk, "HuggingFaceTB/smoltalk"),
    "SmolSmolTalk": _hub(_TEXT, hub.load_smolsmoltalk, "HuggingFaceTB/smol-smoltalk"),
    "PubChem": _hub(_TEXT, hub.load_pubchem, "alxfgh/PubChem10M_SELFIES"),
    "OpenAssistant": _hub(_TEXT, hub.load_openassistant, "timdettmers/openassistant-guanaco"),
    "C4": _hub(_TEXT, hub.load_c4, "allenai/c4 (en, streamed)"),
    "LAION256": _hub(_GENERATION, hub.load_laion256, "nannullna/laion_subset", img_size=512),
    "OpenImage": _hub(_GENERATION, hub.load_openimage, "data-is-better-together/open-image-preferences-v1",
                      img_size=1024),
    "COCO": _hub(_GENERATION, hub.load_coco, "phiyodr/coco2017", img_size=512),
    "ImageNet": _hub(_IMAGE, hub.load_imagenet, "zh-plus/tiny-imagenet", img_size=224, channels=3),
    "MNIST": _hub(_IMAGE, hub.load_mnist, "ylecun/mnist", img_size=28),
    "CIFAR10": _hub(_IMAGE, hub.load_cifar10, "uoft-cs/cifar10", img_size=32, channels=3),
    "CommonVoice": _hub("audio_processing", hub.load_commonvoice, "mozilla-foundation/common_voice_1_0 (en)"),
    "AIPodcast": _hub("audio_processing", hub.load_aipodcast, "reach-vb/random-audios"),
    "Polyglot": _hub("question_answering", hub.load_polyglot, "Polyglot-or-Not/Fact-Completion (English)"),
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
