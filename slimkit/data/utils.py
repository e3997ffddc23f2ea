"""Dataset helpers: a dict-item dataset, the seeded train/val/test split, limiting and peeking at datasets.

These work on the dataset kinds users hand us: Hugging Face ``datasets.Dataset`` / ``IterableDataset``,
PyTorch map-style or iterable datasets, and plain lists of dicts.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset, Subset

from slimkit.errors import DataError


class DictDataset(Dataset):
    """Map-style dataset whose item ``i`` is ``{column: values[i]}`` for equal-length columns."""

    def __init__(self, columns: Mapping[str, Sequence[Any]]) -> None:
        lengths = {name: len(values) for name, values in columns.items()}
        if not lengths:
            raise DataError("DictDataset needs at least one column; got an empty mapping.")
        if len(set(lengths.values())) != 1:
            raise DataError(f"DictDataset columns must have equal lengths; got {lengths}.")
        self.columns = dict(columns)
        self._len = next(iter(lengths.values()))

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> dict[str, Any]:
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(f"index {index} out of range for a dataset of {self._len} items")
        return {name: values[index] for name, values in self.columns.items()}


class _TakeIterable(IterableDataset):
    """The first ``n`` items of an iterable dataset."""

    def __init__(self, source: Any, n: int) -> None:
        self.source, self.n = source, n

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(iter(self.source), self.n)


def is_iterable_dataset(dataset: Any) -> bool:
    """Whether ``dataset`` can only be iterated (no ``len``/indexing), e.g. a streaming Hugging Face dataset."""
    if isinstance(dataset, IterableDataset):
        return True
    return type(dataset).__name__ == "IterableDataset" or not (
        hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")
    )


def column_names(dataset: Any) -> list[str] | None:
    """Column names a Hugging Face dataset declares without reading data (None when it declares none)."""
    names = getattr(dataset, "column_names", None)
    if isinstance(names, (list, tuple)) and names:
        return list(names)
    features = getattr(dataset, "features", None)
    if isinstance(features, Mapping) and features:
        return list(features)
    return None


def first_item(dataset: Any) -> Any | None:
    """The first item of a map-style dataset (None for an empty or iterable-only one: we never consume streams)."""
    if is_iterable_dataset(dataset) or len(dataset) == 0:
        return None
    return dataset[0]


def dataset_size(dataset: Any) -> int | None:
    """Number of items, or None for an iterable-only dataset."""
    return None if is_iterable_dataset(dataset) else len(dataset)


def _select(dataset: Any, indices: list[int]) -> Any:
    """Items ``indices`` of ``dataset``, keeping its kind (HF Dataset, list, or a torch ``Subset``)."""
    if hasattr(dataset, "select") and hasattr(dataset, "column_names"):
        return dataset.select(indices)
    if isinstance(dataset, list):
        return [dataset[i] for i in indices]
    if isinstance(dataset, tuple):
        return tuple(dataset[i] for i in indices)
    return Subset(dataset, indices)


def split_train_into_train_val_test(
    dataset: Any, seed: int = 42, val_fraction: float = 0.1, test_fraction: float = 0.1
) -> tuple[Any, Any, Any]:
    """Split one map-style dataset into disjoint (train, val, test) parts with a seeded permutation.

    The same ``seed`` always gives the same split. Each part keeps the permutation order, so taking the
    first ``n`` items of a part (``DataModule.limit_datasets``) is a random sample, not the start of the data.
    Sizes: ``round(n * fraction)`` for val and test (at least 1 each when the fraction is positive),
    train gets the rest.
    """
    for label, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0.0 <= value < 1.0:
            raise DataError(f"{label} must be in [0, 1); got {value!r}.")
    if val_fraction + test_fraction >= 1.0:
        raise DataError(
            f"val_fraction + test_fraction must be below 1 so train keeps data; got {val_fraction} + {test_fraction}."
        )
    if is_iterable_dataset(dataset):
        raise DataError(
            f"split_train_into_train_val_test needs a map-style dataset with len() and indexing; got "
            f"{type(dataset).__name__}. Materialise it first (e.g. Dataset.from_list(list(stream.take(n))))."
        )
    n = len(dataset)
    n_val = max(1, round(n * val_fraction)) if val_fraction > 0 else 0
    n_test = max(1, round(n * test_fraction)) if test_fraction > 0 else 0
    if n - n_val - n_test < 1:
        raise DataError(
            f"A dataset of {n} items is too small to split into train/val/test with fractions "
            f"{val_fraction}/{test_fraction}; pass at least 3 items or your own (train, val, test) tuple."
        )
    order = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed))).tolist()
    test_idx, val_idx, train_idx = order[:n_test], order[n_test : n_test + n_val], order[n_test + n_val :]
    return _select(dataset, train_idx), _select(dataset, val_idx), _select(dataset, test_idx)


def limit_dataset(dataset: Any, n: int) -> Any:
    """The first ``n`` items of ``dataset`` (all of it when it is shorter), keeping its kind where possible."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise DataError(f"A dataset limit must be a positive int; got {n!r}.")
    if is_iterable_dataset(dataset):
        return dataset.take(n) if hasattr(dataset, "take") else _TakeIterable(dataset, n)
    if len(dataset) <= n:
        return dataset
    return _select(dataset, list(range(n)))
