import json
import os

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from slimkit.errors import ModelNotSupportedError, SaveLoadError
from slimkit.evaluation import count_parameters, size_on_disk
from slimkit.evaluation.size import state_bytes, state_tensors

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*torch.ao.quantization is deprecated"),
    pytest.mark.filterwarnings("ignore:.*quantized tensor creation functions"),
]


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def test_fp32_mlp_is_four_bytes_per_parameter_plus_small_header():
    model = mlp()
    params = count_parameters(model)
    size = size_on_disk(model)
    assert 4 * params < size <= 4 * params + 1024
    assert state_bytes(model) == 4 * params


def test_tied_weights_are_stored_once():
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(100, 32)
            self.head = nn.Linear(32, 100, bias=False)
            self.head.weight = self.embed.weight

    model = Tied()
    assert 4 * 3200 < size_on_disk(model) <= 4 * 3200 + 512


def test_dynamic_int8_model_is_smaller_and_flattened_to_int8():
    model = mlp()
    q = torch.ao.quantization.quantize_dynamic(mlp(), {nn.Linear}, dtype=torch.qint8)
    tensors = state_tensors(q)
    int8 = [t for t in tensors.values() if t.dtype == torch.int8]
    assert sum(t.numel() for t in int8) == 64 * 128 + 128 * 10  # every weight kept, one byte each
    assert size_on_disk(q) < 0.4 * size_on_disk(model)


def test_save_pretrained_objects_are_measured_by_their_own_saver():
    class Saver:
        def save_pretrained(self, path: str) -> None:
            os.makedirs(path)
            with open(os.path.join(path, "weights.bin"), "wb") as f:
                f.write(b"\0" * 1234)
            os.makedirs(os.path.join(path, "sub"))
            with open(os.path.join(path, "sub", "config.json"), "w") as f:
                json.dump({"a": 1}, f)  # 8 bytes

    assert size_on_disk(Saver()) == 1234 + 8


def test_failing_save_pretrained_on_module_falls_back_with_warning():
    class Broken(nn.Sequential):
        def save_pretrained(self, path: str) -> None:
            raise RuntimeError("cannot serialise packed params")

    model = Broken(nn.Linear(8, 8))
    with pytest.warns(RuntimeWarning, match="save_pretrained failed"):
        size = size_on_disk(model)
    assert 4 * 72 < size <= 4 * 72 + 512


def test_failing_save_pretrained_on_non_module_raises():
    class Broken:
        def save_pretrained(self, path: str) -> None:
            raise RuntimeError("disk full")

    with pytest.raises(SaveLoadError, match="could not save a Broken with save_pretrained: disk full"):
        size_on_disk(Broken())


def test_non_module_without_saver_is_refused():
    with pytest.raises(ModelNotSupportedError, match="needs a torch.nn.Module or an object with save_pretrained"):
        size_on_disk([1, 2, 3])


def test_saved_tensors_round_trip(tmp_path):
    from safetensors.torch import save_file

    model = mlp()
    save_file({k: v.cpu() for k, v in state_tensors(model).items()}, str(tmp_path / "m.safetensors"))
    loaded = load_file(str(tmp_path / "m.safetensors"))
    fresh = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    fresh.load_state_dict(loaded, strict=True)
    x = torch.randn(2, 64)
    torch.testing.assert_close(fresh(x), model(x))
