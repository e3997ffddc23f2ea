import pytest
import torch
from datasets import Dataset

from slimkit.data import DataModule, DictDataset, make_datamodule, split_train_into_train_val_test
from slimkit.errors import DataError

TEXTS = [f"Sentence number {i} talks about compressing neural networks." for i in range(40)]


def test_reference_custom_dataset_example_offline(tokenizer):
    train_ds = Dataset.from_dict({"text": TEXTS})
    train_ds, val_ds, test_ds = split_train_into_train_val_test(train_ds, seed=42)
    dm = make_datamodule(
        (train_ds, val_ds, test_ds), collate_fn="text_generation_collate", tokenizer=tokenizer, max_seq_len=24
    )
    assert (len(dm.train), len(dm.val), len(dm.test)) == (32, 4, 4)
    assert dm.name == "custom" and dm.collate_fn_name == "text_generation_collate"
    input_ids, labels = next(iter(dm.train_dataloader(batch_size=5)))
    assert input_ids.shape == labels.shape == (5, 24)
    seen = [len(batch[0]) for batch in dm.val_dataloader(batch_size=3)]
    assert seen == [3, 1]


def test_datamodule_passthrough():
    dm = DataModule.from_string("Digits")
    assert make_datamodule(dm) is dm
    assert make_datamodule(dm, collate_fn="text_generation_collate") is dm


def test_bad_collate_name_lists_valid_names():
    parts = ([{"text": "a"}], [{"text": "b"}], [{"text": "c"}])
    with pytest.raises(DataError) as info:
        make_datamodule(parts, collate_fn="text_generation_colate")
    message = str(info.value)
    assert "Unknown collate function 'text_generation_colate'" in message
    assert "Did you mean 'text_generation_collate'" in message
    assert "image_classification_collate" in message and "audio_processing_collate" in message


def test_missing_field_is_reported_at_construction(tokenizer):
    bad = Dataset.from_dict({"content": TEXTS})
    parts = split_train_into_train_val_test(bad)
    with pytest.raises(DataError) as info:
        make_datamodule(parts, collate_fn="text_generation_collate", tokenizer=tokenizer)
    message = str(info.value)
    assert "The train items lack field(s) 'text'" in message
    assert "their fields are ['content']" in message and '{"text": str}' in message


def test_missing_field_on_plain_items_and_any_of_group():
    parts = ([{"image": torch.zeros(1, 4, 4)}],) * 3
    with pytest.raises(DataError, match=r"lack field\(s\) 'label' that 'image_classification_collate' needs"):
        make_datamodule(parts, collate_fn="image_classification_collate")
    audio = ([{"sentence": "hi"}],) * 3
    with pytest.raises(DataError, match=r"lack field\(s\) 'audio or path'"):
        make_datamodule(audio, collate_fn="audio_processing_collate")


def test_non_dict_items_and_broken_first_item():
    parts = ([(torch.zeros(1, 4, 4), 1)],) * 3
    with pytest.raises(DataError, match=r"The train items are tuple, but 'image_classification_collate' needs dict"):
        make_datamodule(parts, collate_fn="image_classification_collate")
    broken = ([{"image": "not-an-image", "label": 0}],) * 3
    with pytest.raises(DataError, match=r"failed on the first train item: DataError: Cannot use an image of type str"):
        make_datamodule(broken, collate_fn="image_classification_collate")


def test_tuple_without_collate_or_wrong_shape():
    with pytest.raises(DataError, match=r"needs collate_fn=\.\.\.: one of audio_processing_collate"):
        make_datamodule(([{"text": "a"}],) * 3)
    with pytest.raises(DataError, match=r"needs a \(train, val, test\) tuple; got tuple of length 2"):
        make_datamodule(([{"text": "a"}],) * 2, collate_fn="text_generation_collate")
    with pytest.raises(DataError, match=r"got a list of items, i.e. one dataset"):
        make_datamodule([{"text": "a"}] * 3, collate_fn="text_generation_collate")
    with pytest.raises(DataError, match=r"Cannot use data of type int"):
        make_datamodule(3)


def test_unknown_collate_argument():
    with pytest.raises(DataError, match=r"Unknown collate argument\(s\) \['image_size'\].*Did you mean 'img_size'"):
        DataModule.from_string("Digits", image_size=16)


def test_custom_callable_collate_gets_tokenizer_and_kwargs(tokenizer):
    def my_collate(batch, tokenizer, prefix=""):
        return [len(tokenizer(prefix + item["text"])["input_ids"]) for item in batch]

    parts = tuple([{"text": t} for t in TEXTS[i : i + 4]] for i in (0, 4, 8))
    dm = DataModule.from_datasets(parts, my_collate, tokenizer=tokenizer, prefix="hi ")
    lengths = next(iter(dm.test_dataloader(batch_size=2)))
    assert lengths == [len(tokenizer("hi " + TEXTS[8])["input_ids"]), len(tokenizer("hi " + TEXTS[9])["input_ids"])]


def test_limit_datasets_int_and_tuple():
    dm = DataModule.from_string("Digits")
    first = dm.train[0]["label"]
    dm.limit_datasets(20)
    assert (len(dm.train), len(dm.val), len(dm.test)) == (20, 20, 20)
    assert dm.train[0]["label"] == first
    dm.limit_datasets((10, 5, 100))
    assert (len(dm.train), len(dm.val), len(dm.test)) == (10, 5, 20)
    with pytest.raises(DataError, match=r"positive int; got 0"):
        dm.limit_datasets(0)


def test_streaming_datasets_are_not_shuffled_and_can_be_limited(tokenizer):
    stream = Dataset.from_dict({"text": TEXTS}).to_iterable_dataset()
    dm = make_datamodule(
        (stream, stream, stream), collate_fn="text_generation_collate", tokenizer=tokenizer, max_seq_len=8
    )
    assert "train=stream" in repr(dm)
    dm.limit_datasets(6)
    batches = list(dm.train_dataloader(batch_size=4))  # shuffle=True is dropped for streams
    assert [b[0].shape[0] for b in batches] == [4, 2]
    wrong = Dataset.from_dict({"body": TEXTS}).to_iterable_dataset()
    with pytest.raises(DataError, match=r"lack field\(s\) 'text'"):
        make_datamodule((wrong, wrong, wrong), collate_fn="text_generation_collate", tokenizer=tokenizer)


def test_missing_split_errors_at_loader_time():
    dm = DataModule(
        DictDataset({"image": [torch.zeros(1, 2, 2)], "label": [0]}), None, None, "image_classification_collate"
    )
    assert next(iter(dm.train_dataloader(batch_size=1)))[0].shape == (1, 1, 2, 2)
    with pytest.raises(DataError, match=r"has no val dataset"):
        dm.val_dataloader()
