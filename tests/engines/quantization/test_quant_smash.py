"""The training-aware smash quantizers (qat, dorefa, bnn, lsq) beyond the harness: errors, seeds, custom layers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from slimkit import SmashConfig, SmashedModel, smash
from slimkit.data.utils import DictDataset
from slimkit.engines.quantization import QuantizedLayer
from slimkit.errors import ConfigError, DataError, MissingComponentError
from slimkit.utils import model_device


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


def _config(name: str, data: bool = True, **hyperparameters) -> SmashConfig:
    cfg = SmashConfig()
    if data:
        cfg.add_data("Digits")
        cfg.data.limit_datasets(128)
    cfg.activate(name)
    for key, value in {"epochs": 1, "num_threads": 1, **hyperparameters}.items():
        cfg[f"{name}_{key}"] = value
    return cfg


def _x() -> torch.Tensor:
    return torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(3))


def test_data_is_required():
    with pytest.raises(MissingComponentError, match="qat needs a dataset; add one with cfg.add_data"):
        smash(_mlp(), _config("qat", data=False), verbose=False)


@pytest.mark.parametrize("name", ["qat", "dorefa", "bnn", "lsq"])
def test_linear_only_model_is_quantized_and_reloads_exactly(name, tmp_path):
    threads = torch.get_num_threads()
    smashed = smash(_mlp(), _config(name), verbose=False)
    assert torch.get_num_threads() == threads  # restored after training on one thread
    layers = [n for n, m in smashed.model.named_modules() if isinstance(m, QuantizedLayer)]
    assert layers == ["1", "3"]
    assert smashed.applied[0]["state"]["train_steps"] == 2  # 128 items / batch 64, one epoch
    smashed.save_pretrained(tmp_path / "saved")
    again = SmashedModel.from_pretrained(tmp_path / "saved", model=_mlp)
    with torch.no_grad():
        assert torch.equal(again(_x()), smashed(_x()))


def test_same_seed_same_result_and_other_seed_differs():
    outs = []
    for seed in (0, 0, 1):
        smashed = smash(_mlp(), _config("lsq", seed=seed), verbose=False)
        with torch.no_grad():
            outs.append(smashed(_x()))
    assert torch.equal(outs[0], outs[1])
    assert not torch.equal(outs[0], outs[2])


def test_bnn_binarizes_activation_layers_on_request():
    smashed = smash(_mlp(), _config("bnn", binarize_activations=True), verbose=False)
    relu = smashed.model.get_submodule("2")
    assert isinstance(relu, QuantizedLayer) and relu.bits == {"output": 1}
    hidden = smashed.model[2](smashed.model[1](smashed.model[0](_x().to(model_device(smashed)))))
    assert set(hidden.unique().tolist()) <= {-1.0, 1.0}


def test_exclude_patterns_are_checked():
    smashed = smash(_mlp(), _config("qat", exclude=["3"]), verbose=False)
    assert isinstance(smashed.model[3], nn.Linear) and isinstance(smashed.model[1], QuantizedLayer)
    with pytest.raises(ConfigError, match=r"exclude pattern 'fc\*' matches no Linear/Conv layer. Layer names: 1, 3"):
        smash(_mlp(), _config("qat", exclude=["fc*"]), verbose=False)
    with pytest.raises(ConfigError, match="removes every Linear/Conv layer"):
        smash(_mlp(), _config("dorefa", exclude=["*"]), verbose=False)


def test_bnn_activation_binarization_needs_activation_layers():
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    with pytest.raises(ConfigError, match="bnn_binarize_activations is on but the model has no activation module"):
        smash(model, _config("bnn", binarize_activations=True), verbose=False)


def test_batches_without_labels_are_refused():
    images = [torch.rand(1, 8, 8) for _ in range(8)]
    data = DictDataset({"image": images})
    cfg = _config("qat", data=False)
    cfg.add_data((data, None, None), collate_fn=lambda items: torch.stack([i["image"] for i in items]))
    with pytest.raises(DataError, match=r"need \(inputs, integer labels\) batches"):
        smash(_mlp(), cfg, verbose=False)
