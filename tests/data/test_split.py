import pytest
import torch
from datasets import Dataset

from slimkit.data import DictDataset, split_train_into_train_val_test
from slimkit.errors import DataError


def test_split_sizes_and_disjoint_hf_dataset():
    ds = Dataset.from_dict({"text": [f"doc {i}" for i in range(100)]})
    train, val, test = split_train_into_train_val_test(ds, seed=42)
    assert all(isinstance(part, Dataset) for part in (train, val, test))
    assert (len(train), len(val), len(test)) == (80, 10, 10)
    texts = [set(part["text"]) for part in (train, val, test)]
    assert sum(map(len, texts)) == 100 and set().union(*texts) == set(ds["text"])


def test_split_is_deterministic_and_seeded():
    data = list(range(50))
    items = [{"x": i} for i in data]
    a = split_train_into_train_val_test(items, seed=3)
    b = split_train_into_train_val_test(items, seed=3)
    c = split_train_into_train_val_test(items, seed=4)
    assert a == b and a != c
    assert all(isinstance(part, list) for part in a)
    assert sorted(x["x"] for part in a for x in part) == data


def test_split_custom_fractions_and_torch_dataset():
    ds = DictDataset({"x": torch.arange(1000)})
    train, val, test = split_train_into_train_val_test(ds, val_fraction=0.25, test_fraction=0.05)
    assert (len(train), len(val), len(test)) == (700, 250, 50)
    assert isinstance(train, torch.utils.data.Subset)


def test_split_small_and_bad_input():
    assert [len(p) for p in split_train_into_train_val_test([{"a": 1}] * 3)] == [1, 1, 1]
    with pytest.raises(DataError, match=r"too small to split"):
        split_train_into_train_val_test([{"a": 1}] * 2)
    with pytest.raises(DataError, match=r"val_fraction must be in \[0, 1\); got 1.5"):
        split_train_into_train_val_test([{"a": 1}] * 10, val_fraction=1.5)
    with pytest.raises(DataError, match=r"must be below 1"):
        split_train_into_train_val_test([{"a": 1}] * 10, val_fraction=0.5, test_fraction=0.5)
    stream = Dataset.from_dict({"a": [1, 2, 3]}).to_iterable_dataset()
    with pytest.raises(DataError, match=r"needs a map-style dataset"):
        split_train_into_train_val_test(stream)
