import numpy as np
import pytest
import torch
from PIL import Image

from slimkit.data import (
    COLLATE_FUNCTIONS,
    audio_processing_collate,
    image_classification_collate,
    image_generation_collate,
    question_answering_collate,
    text_generation_collate,
)
from slimkit.errors import DataError


def test_collate_table_names():
    assert sorted(COLLATE_FUNCTIONS) == [
        "audio_processing_collate",
        "image_classification_collate",
        "image_generation_collate",
        "question_answering_collate",
        "text_generation_collate",
    ]


def test_text_generation_collate_shift_and_padding(tokenizer):
    batch = [{"text": "hello world"}, {"text": "the quick brown fox jumps over the lazy dog " * 20}]
    input_ids, labels = text_generation_collate(batch, tokenizer, max_seq_len=16)
    assert input_ids.shape == labels.shape == (2, 16) and input_ids.dtype == labels.dtype == torch.int64
    full = tokenizer("hello world")["input_ids"]  # [CLS] hello world [SEP]
    n = len(full)
    assert input_ids[0, :n].tolist() == full and labels[0, : n - 1].tolist() == full[1:]
    assert (labels[0, n - 1 :] == -100).all()  # padding is ignored by the loss
    assert (input_ids[0, n:] == tokenizer.pad_token_id).all()
    assert torch.equal(input_ids[1, 1:], labels[1, :-1])  # truncated long text: plain shift, no padding
    assert (labels[1] != -100).all()


def test_question_answering_collate(tokenizer):
    batch = [{"question": "What is the capital of France?", "answer": "Paris"}]
    questions, answers = question_answering_collate(batch, tokenizer, max_seq_len=12)
    assert questions.shape == answers.shape == (1, 12)
    assert questions[0, :3].tolist() == tokenizer("What is the capital")["input_ids"][:3]
    assert answers[0].tolist()[:3] == tokenizer("Paris")["input_ids"] and answers[0, 3:].eq(0).all()


def test_image_classification_collate_converts_pil_numpy_and_tensor():
    gray = Image.fromarray(np.full((8, 8), 255, dtype=np.uint8), mode="L")
    rgb = Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8), mode="RGB")
    array = np.full((8, 8, 3), 51, dtype=np.uint8)
    tensor = torch.full((3, 8, 8), 0.5)
    images, labels = image_classification_collate(
        [
            {"image": gray, "label": 1},
            {"image": rgb, "label": 2},
            {"image": array, "label": np.int64(3)},
            {"image": tensor, "label": torch.tensor(4)},
        ]
    )
    assert images.shape == (4, 3, 8, 8) and images.dtype == torch.float32
    assert labels.tolist() == [1, 2, 3, 4] and labels.dtype == torch.int64
    assert torch.allclose(images[0], torch.ones(3, 8, 8))  # gray repeated to 3 channels, 255 -> 1.0
    assert torch.allclose(images[2], torch.full((3, 8, 8), 0.2))
    assert torch.allclose(images[3], tensor)


def test_image_classification_collate_resize_crop_and_normalise():
    wide = Image.fromarray(np.full((20, 40, 3), 128, dtype=np.uint8))
    images, _ = image_classification_collate([{"image": wide, "label": 0}], img_size=10, mean=(0.5,), std=(0.5,))
    assert images.shape == (1, 3, 10, 10)
    assert torch.allclose(images, torch.full_like(images, (128 / 255 - 0.5) / 0.5), atol=1e-5)


def test_image_collate_mixed_sizes_need_img_size():
    batch = [{"image": torch.zeros(1, 8, 8), "label": 0}, {"image": torch.zeros(1, 9, 9), "label": 1}]
    with pytest.raises(DataError, match=r"different sizes.*pass img_size=N"):
        image_classification_collate(batch)
    assert image_classification_collate(batch, img_size=6)[0].shape == (2, 1, 6, 6)


def test_image_collate_rejects_bad_labels_and_images():
    with pytest.raises(DataError, match=r"A label must be an int class index; got 'cat'"):
        image_classification_collate([{"image": torch.zeros(1, 2, 2), "label": "cat"}])
    with pytest.raises(DataError, match=r"Cannot use an image of type str"):
        image_classification_collate([{"image": "cat.png", "label": 0}])


def test_image_generation_collate_returns_images_and_texts():
    batch = [
        {"image": Image.new("RGB", (16, 12), (255, 0, 0)), "text": "a red square"},
        {"image": Image.new("P", (12, 16)), "text": "a dark square"},
    ]
    images, texts = image_generation_collate(batch, img_size=8)
    assert images.shape == (2, 3, 8, 8) and texts == ["a red square", "a dark square"]
    assert torch.allclose(images[0, 0], torch.ones(8, 8)) and torch.allclose(images[0, 1], torch.zeros(8, 8))


def test_audio_processing_collate():
    wave = np.linspace(-1, 1, 100)
    batch = [
        {"audio": torch.ones(50), "path": None, "sentence": "one"},
        {"audio": {"array": wave, "sampling_rate": 16000, "path": "a.flac"}, "sentence": "two"},
        {"audio": None, "path": "/data/clip.wav", "sentence": "three"},
    ]
    inputs, sentences = audio_processing_collate(batch)
    assert sentences == ["one", "two", "three"]
    assert inputs[0].shape == (50,) and inputs[1].dtype == torch.float32 and inputs[1].shape == (100,)
    assert inputs[2] == "/data/clip.wav"
    with pytest.raises(DataError, match=r"neither a waveform in 'audio' nor a file in 'path'"):
        audio_processing_collate([{"audio": None, "path": None, "sentence": "x"}])
