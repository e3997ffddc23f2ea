import pytest
import torch

from slimkit.data import DataModule, list_datasets, make_datamodule, pydoc_split_topics, pydoc_text_blocks
from slimkit.data.builtin import pydoc_token_stream
from slimkit.errors import DataError


def test_digits_splits_are_disjoint_and_cover_all_1797():
    dm = DataModule.from_string("Digits")
    assert dm.name == "Digits"
    sizes = [len(dm.train), len(dm.val), len(dm.test)]
    assert sizes == [1437, 180, 180]
    assert sum(sizes) == 1797
    idx = [set(part.indices) for part in (dm.train, dm.val, dm.test)]
    assert not (idx[0] & idx[1]) and not (idx[0] & idx[2]) and not (idx[1] & idx[2])
    assert set().union(*idx) == set(range(1797))


def test_digits_items_and_batches():
    dm = make_datamodule("digits")  # ids are case-insensitive
    item = dm.train[0]
    assert item["image"].shape == (1, 8, 8) and item["image"].dtype == torch.float32
    assert 0.0 <= float(item["image"].min()) and float(item["image"].max()) <= 1.0
    assert isinstance(item["label"], int) and 0 <= item["label"] <= 9
    images, labels = next(iter(dm.test_dataloader(batch_size=16)))
    assert images.shape == (16, 1, 8, 8) and images.dtype == torch.float32
    assert labels.shape == (16,) and labels.dtype == torch.int64
    all_labels = torch.cat([y for _, y in dm.val_dataloader(batch_size=64)])
    assert all_labels.numel() == 180 and set(all_labels.tolist()) == set(range(10))
    # images are the real sklearn digits scaled by 1/16
    from sklearn.datasets import load_digits

    raw = load_digits()
    index = dm.test.indices[0]
    assert torch.allclose(dm.test[0]["image"][0], torch.tensor(raw.images[index] / 16.0, dtype=torch.float32))
    assert dm.test[0]["label"] == int(raw.target[index])


def test_digits_split_is_seeded():
    a, b = DataModule.from_string("Digits"), DataModule.from_string("Digits", seed=42)
    c = DataModule.from_string("Digits", seed=7)
    assert a.test.indices == b.test.indices
    assert a.test.indices != c.test.indices


def test_list_datasets_covers_reference_ids():
    ids = list_datasets()
    assert ids["Digits"] == "image_classification" and ids["PyDocText"] == "text_generation"
    for name in ("WikiText", "SmolTalk", "SmolSmolTalk", "PubChem", "OpenAssistant", "C4"):
        assert ids[name] == "text_generation"
    for name in ("MNIST", "CIFAR10", "ImageNet"):
        assert ids[name] == "image_classification"
    for name in ("LAION256", "OpenImage", "COCO"):
        assert ids[name] == "image_generation"
    assert ids["CommonVoice"] == ids["AIPodcast"] == "audio_processing"
    assert ids["Polyglot"] == "question_answering"


def test_unknown_dataset_id_lists_valid_ids():
    with pytest.raises(DataError, match=r"Unknown dataset id 'Digit'.*Did you mean 'Digits'.*Valid ids: Digits"):
        make_datamodule("Digit")


def test_pydoc_topics_split_by_whole_documents():
    from pydoc_data.topics import topics

    splits = pydoc_split_topics()
    sets = {name: set(names) for name, names in splits.items()}
    assert not (sets["train"] & sets["test"]) and not (sets["train"] & sets["val"]) and not (sets["val"] & sets["test"])
    assert sets["train"] | sets["val"] | sets["test"] == set(topics)
    total = sum(map(len, topics.values()))
    test_chars = sum(len(topics[n]) for n in splits["test"])
    assert 0.1 * total <= test_chars < 0.1 * total + max(map(len, topics.values()))
    assert pydoc_split_topics() == splits  # deterministic


def test_pydoc_blocks_shape_and_calibration_test_disjoint(tokenizer):
    test_blocks = pydoc_text_blocks(tokenizer, n_blocks=8, block_len=64, split="test")
    calib = pydoc_text_blocks(tokenizer, n_blocks=8, block_len=64, split="calibration")
    assert test_blocks.shape == (8, 64) == calib.shape and test_blocks.dtype == torch.long
    assert torch.equal(test_blocks, pydoc_text_blocks(tokenizer, 8, 64, split="test"))  # deterministic
    assert not torch.equal(test_blocks, calib)
    # blocks are contiguous cuts of the split's token stream
    stream = pydoc_token_stream(tokenizer, "test")
    assert test_blocks.flatten().tolist() == stream[: 8 * 64]
    # no 64-token test window appears anywhere in the calibration text
    calib_stream = pydoc_token_stream(tokenizer, "calibration")
    windows = {tuple(calib_stream[i : i + 64]) for i in range(len(calib_stream) - 63)}
    assert not any(tuple(row) in windows for row in test_blocks.tolist())


def test_pydoc_blocks_errors(tokenizer):
    with pytest.raises(DataError, match=r"fewer than the 100000 asked for"):
        pydoc_text_blocks(tokenizer, n_blocks=100000, block_len=64)
    with pytest.raises(DataError, match=r"Unknown PyDocText split 'eval'"):
        pydoc_text_blocks(tokenizer, 1, 8, split="eval")
    with pytest.raises(DataError, match=r"block_len must be a positive int"):
        pydoc_text_blocks(tokenizer, 1, 0)


def test_pydoc_text_datamodule_needs_tokenizer():
    with pytest.raises(DataError, match=r"'text_generation_collate' needs a tokenizer"):
        DataModule.from_string("PyDocText")


def test_pydoc_text_datamodule_batches(tokenizer):
    dm = DataModule.from_string("PyDocText", tokenizer=tokenizer, max_seq_len=32)
    assert len(dm.train) > len(dm.test) > 10
    train_texts = {item["text"] for item in dm.train}
    assert not train_texts & {item["text"] for item in dm.test}
    input_ids, labels = next(iter(dm.test_dataloader(batch_size=4)))
    assert input_ids.shape == labels.shape == (4, 32)
    assert torch.equal(input_ids[:, 1:], labels[:, :-1])  # long chunks: no padding, labels shifted by one


def test_photos_are_real_crops_split_by_photo():
    from slimkit.data import DataModule

    photos = DataModule.from_string("Photos")
    splits = [photos.train_dataloader(batch_size=64, shuffle=False), photos.val_dataloader(batch_size=64),
              photos.test_dataloader(batch_size=64)]
    labels = []
    for loader in splits:
        x, y = next(iter(loader))
        assert x.shape[1:] == (3, 224, 224) and abs(float(x.mean())) < 1.0  # ImageNet-normalised
        labels.append(set(y.tolist()))
    assert len(labels[0]) == 6 and len(labels[1]) == 3 and len(labels[2]) == 3
    assert not (labels[0] & labels[1]) and not (labels[0] & labels[2]) and not (labels[1] & labels[2])
