import time

import pytest
import torch
from datasets import Dataset
from PIL import Image

from slimkit.data import DataModule, hub, list_datasets, make_datamodule
from slimkit.data.registry import BUILTIN_DATASETS
from slimkit.errors import DataError

HUB_IDS = [name for name, spec in BUILTIN_DATASETS.items() if not spec.offline]


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def test_hub_ids_cover_the_reference_table():
    assert set(HUB_IDS) == {
        "WikiText",
        "SmolTalk",
        "SmolSmolTalk",
        "PubChem",
        "OpenAssistant",
        "C4",
        "LAION256",
        "OpenImage",
        "COCO",
        "ImageNet",
        "MNIST",
        "CIFAR10",
        "CommonVoice",
        "AIPodcast",
        "Polyglot",
    }
    assert set(list_datasets()) == set(HUB_IDS) | {"Digits", "Photos", "PyDocText"}


@pytest.mark.parametrize("dataset_id", HUB_IDS)
def test_hub_dataset_fails_fast_offline_with_guidance(offline, tokenizer, dataset_id):
    import datasets.config
    import huggingface_hub.constants

    before = (datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE)
    start = time.perf_counter()
    with pytest.raises(DataError) as info:
        make_datamodule(dataset_id, tokenizer=tokenizer)
    assert time.perf_counter() - start < 5.0  # no network retries
    message = str(info.value)
    assert f"Built-in dataset {dataset_id!r}" in message
    assert "the Hugging Face Hub is not reachable offline" in message
    assert "make_datamodule((train, val, test), collate_fn=" in message and "or a DataModule" in message
    assert "'Digits', 'PyDocText'" in message
    assert info.value.__cause__ is not None
    assert (datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE) == before


def _fake_hub(monkeypatch, tables):
    """Serve local tables instead of the hub: tables[(path, split)] -> Dataset."""
    calls = []

    def fake(path, *args, split=None, streaming=False, **kwargs):
        calls.append((path, args, split, streaming))
        splits = split if isinstance(split, list) else [split]
        out = [tables[(path, s)] for s in splits]
        if streaming:
            out = [ds.to_iterable_dataset() for ds in out]
        return out if isinstance(split, list) else out[0]

    monkeypatch.setattr(hub, "load_hub_dataset", fake)
    return calls


def test_cifar10_loader_renames_img_and_splits(monkeypatch):
    img = [Image.new("RGB", (32, 32), (i, 0, 0)) for i in range(20)]
    table = Dataset.from_dict({"img": img, "label": list(range(10)) * 2})
    calls = _fake_hub(monkeypatch, {("uoft-cs/cifar10", "train"): table, ("uoft-cs/cifar10", "test"): table})
    dm = DataModule.from_string("CIFAR10")
    assert calls[0][0] == "uoft-cs/cifar10"
    assert (len(dm.train), len(dm.val), len(dm.test)) == (18, 2, 20)
    images, labels = next(iter(dm.test_dataloader(batch_size=4)))
    assert images.shape == (4, 3, 32, 32) and labels.tolist() == [0, 1, 2, 3]


def test_smoltalk_loader_flattens_messages(monkeypatch, tokenizer):
    chats = Dataset.from_dict(
        {
            "messages": [
                [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}] for i in range(10)
            ]
        }
    )
    _fake_hub(monkeypatch, {("HuggingFaceTB/smoltalk", "train"): chats, ("HuggingFaceTB/smoltalk", "test"): chats})
    dm = DataModule.from_string("SmolTalk", tokenizer=tokenizer, max_seq_len=16)
    assert dm.test[0]["text"] == "user: q0\n\nassistant: a0"
    assert next(iter(dm.train_dataloader(batch_size=2)))[0].shape == (2, 16)


def test_polyglot_loader_renames_to_question_answer(monkeypatch, tokenizer):
    facts = Dataset.from_dict(
        {
            "stem": [f"The capital of country {i} is" for i in range(10)],
            "true": [f"city {i}" for i in range(10)],
            "false": ["x"] * 10,
        }
    )
    _fake_hub(monkeypatch, {("Polyglot-or-Not/Fact-Completion", "English"): facts})
    dm = DataModule.from_string("Polyglot", tokenizer=tokenizer, max_seq_len=10)
    assert (len(dm.train), len(dm.val), len(dm.test)) == (8, 1, 1)
    question, answer = next(iter(dm.test_dataloader(batch_size=1)))
    assert question.shape == answer.shape == (1, 10)


def test_c4_loader_streams_disjoint_val_and_test(monkeypatch, tokenizer):
    docs = Dataset.from_dict({"text": [f"web page {i}" for i in range(12)], "url": ["u"] * 12})
    _fake_hub(monkeypatch, {("allenai/c4", "train"): docs, ("allenai/c4", "validation"): docs})
    dm = DataModule.from_string("C4", tokenizer=tokenizer, val_size=5, max_seq_len=8)
    assert [x["text"] for x in dm.val] == [f"web page {i}" for i in range(5)]
    assert [x["text"] for x in dm.test] == [f"web page {i}" for i in range(5, 12)]
    assert torch.is_tensor(next(iter(dm.train_dataloader(batch_size=3)))[0])


def test_coco_loader_reads_local_images(monkeypatch, tmp_path):
    (tmp_path / "val2017").mkdir()
    names = []
    for i in range(4):
        name = f"val2017/{i:012d}.jpg"
        Image.new("RGB", (40, 30), (0, 60 * i, 0)).save(tmp_path / name)
        names.append(name)
    table = Dataset.from_dict({"file_name": names, "captions": [[f"caption {i}", "other"] for i in range(4)]})
    _fake_hub(monkeypatch, {("phiyodr/coco2017", "train"): table, ("phiyodr/coco2017", "validation"): table})
    dm = DataModule.from_string("COCO", image_dir=str(tmp_path), img_size=16)
    assert (len(dm.train), len(dm.val), len(dm.test)) == (4, 2, 2)
    images, texts = next(iter(dm.train_dataloader(batch_size=4, shuffle=False)))
    assert images.shape == (4, 3, 16, 16) and texts == [f"caption {i}" for i in range(4)]
    with pytest.raises(DataError, match=r"COCO needs its images on disk: got image_dir='/nonexistent'"):
        DataModule.from_string("COCO", image_dir="/nonexistent")
