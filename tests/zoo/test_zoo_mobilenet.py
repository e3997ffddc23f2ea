from __future__ import annotations

import numpy as np
import pytest
import torch

from slimkit import zoo
from slimkit.errors import DataError
from slimkit.zoo.mobilenet_v2 import IMAGENET_CAT_CLASSES, MobileNetV2


@pytest.fixture(scope="module")
def mobilenet():
    return zoo.load("mobilenet_v2")


def test_chelsea_is_classified_as_a_cat(mobilenet):
    x = mobilenet.example_inputs
    assert x.shape == (1, 3, 224, 224)
    with torch.no_grad():
        probs = mobilenet.model(x).softmax(-1)[0]
    assert int(probs.argmax()) in IMAGENET_CAT_CLASSES
    assert float(probs[list(IMAGENET_CAT_CLASSES)].sum()) > 0.8


def test_coffee_is_not_a_cat(mobilenet):
    import skimage.data as skimage_data
    with torch.no_grad():
        top = int(mobilenet.model(zoo.imagenet_preprocess(skimage_data.coffee())).argmax())
    assert top not in IMAGENET_CAT_CLASSES
    assert top in (504, 967, 968)  # coffee mug, espresso, cup


def test_mobilenet_batch_kwarg_and_keys(mobilenet):
    zm = zoo.load("mobilenet_v2", batch_size=3)
    assert zm.example_inputs.shape == (3, 3, 224, 224)
    assert torch.equal(zm.example_inputs[2], mobilenet.example_inputs[0])
    keys = list(mobilenet.model.state_dict())
    assert len(keys) == 314 and keys[0] == "features.0.0.weight" and keys[-1] == "classifier.1.bias"
    assert sum(p.numel() for p in mobilenet.model.parameters()) == 3_504_872


def test_mobilenet_build_matches_load(mobilenet):
    built = zoo.build("mobilenet_v2")
    assert isinstance(built, MobileNetV2)
    assert {k: v.shape for k, v in built.state_dict().items()} == {
        k: v.shape for k, v in mobilenet.model.state_dict().items()
    }
    assert not torch.equal(built.classifier[1].weight, mobilenet.model.classifier[1].weight)


def test_imagenet_preprocess_normalises():
    white = np.full((300, 400, 3), 255, dtype=np.uint8)
    x = zoo.imagenet_preprocess(white)
    assert x.shape == (1, 3, 224, 224)
    expected = (1 - torch.tensor([0.485, 0.456, 0.406])) / torch.tensor([0.229, 0.224, 0.225])
    assert torch.allclose(x[0, :, 100, 100], expected, atol=1e-4)
    grey = zoo.imagenet_preprocess(np.zeros((240, 240), dtype=np.float32))
    assert torch.allclose(grey[0, 0], torch.full((224, 224), -0.485 / 0.229), atol=1e-5)
    rgba = zoo.imagenet_preprocess(np.zeros((256, 256, 4), dtype=np.uint8))
    assert rgba.shape == (1, 3, 224, 224)


def test_imagenet_preprocess_rejects_bad_shape():
    with pytest.raises(DataError, match=r"got shape \(5, 5, 2\)"):
        zoo.imagenet_preprocess(np.zeros((5, 5, 2)))
