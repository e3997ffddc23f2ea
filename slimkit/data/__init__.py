"""Data layer: built-in datasets, collate functions and the DataModule (Pruna's data API, offline-first).

``make_datamodule`` turns a built-in id, a ``(train, val, test)`` tuple with a collate function, or a
DataModule into a DataModule; ``Digits`` and ``PyDocText`` work offline, the Hugging Face ids need the hub
or a local ``datasets`` cache.
"""

from slimkit.data.batches import LABEL_KEYS, move_batch, split_batch
from slimkit.data.builtin import pydoc_split_topics, pydoc_text_blocks
from slimkit.data.collate import (
    COLLATE_FUNCTIONS,
    audio_processing_collate,
    image_classification_collate,
    image_generation_collate,
    question_answering_collate,
    text_generation_collate,
)
from slimkit.data.datamodule import DataModule, make_datamodule
from slimkit.data.registry import list_datasets
from slimkit.data.utils import DictDataset, split_train_into_train_val_test

__all__ = [
    "COLLATE_FUNCTIONS",
    "DataModule",
    "DictDataset",
    "LABEL_KEYS",
    "audio_processing_collate",
    "image_classification_collate",
    "image_generation_collate",
    "list_datasets",
    "make_datamodule",
    "move_batch",
    "pydoc_split_topics",
    "pydoc_text_blocks",
    "question_answering_collate",
    "split_batch",
    "split_train_into_train_val_test",
    "text_generation_collate",
]
