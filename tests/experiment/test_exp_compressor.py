"""create_compressor end to end: the Auptimizer L1-filter example, speedup, export round-trips."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from slimkit import zoo
from slimkit.engines.pruning import load_masks
from slimkit.engines.speedup import SpeedupWarning, apply_kept_channels
from slimkit.evaluation import count_macs, count_parameters
from slimkit.faces.auptimizer import create_compressor, load_compressed_model

# The reference's one-time L1-filter experiment, on resnet_tiny's layer names: a default sparsity for every
# Conv2d, two layers at another sparsity, one layer excluded.
EXPERIMENT = {
    "name": "resnet_tiny L1 Filter Pruner",
    "script": "train.py",
    "resource": "cpu",
    "compression": {
        "framework": "torch",
        "type": "pruning",
        "compressor": "l1_filter",
        "config_list": [
            {"sparsity": 0.5, "op_types": ["Conv2d"]},
            {"sparsity": 0.25, "op_names": ["layer1.0.conv1", "layer2.0.conv1"]},
            {"exclude": True, "op_names": ["layer2.0.downsample.0"]},
        ],
    },
}


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def zero_rows(mask: torch.Tensor) -> int:
    return int((mask.reshape(mask.shape[0], -1).sum(1) == 0).sum())


def test_reference_l1_filter_example(tmp_path):
    model, x = zoo.load("resnet_tiny", batch_size=2, image_size=16)
    base = zoo.build("resnet_tiny", **model.slimkit_zoo_kwargs)
    base.load_state_dict(model.state_dict())
    excluded_weight = model.layer2[0].downsample[0].weight.detach().clone()
    # NNI's per-layer mode (each layer ranks its own filters); with an input the default is dependency-aware
    compressor = create_compressor(model, EXPERIMENT, dummy_input=x[:1], dependency_aware=False)
    assert compressor.kind == "pruning" and compressor.name == "l1_filter"

    masked = compressor.compress()
    masks = compressor.get_masks()
    assert "layer2.0.downsample.0" not in masks
    assert zero_rows(masks["layer1.0.conv1"]["weight_mask"]) == 4  # floor(0.25 * 16)
    assert zero_rows(masks["layer2.0.conv1"]["weight_mask"]) == 8  # floor(0.25 * 32)
    assert zero_rows(masks["conv1"]["weight_mask"]) == 8  # default 0.5 of 16
    with torch.no_grad():
        masked_out = masked.eval()(x)

    # layer2.0.conv2 shares its channels with the excluded downsample conv, so it keeps them all; conv1 and
    # layer1.0.conv2 (the stage-1 residual stream) chose their filters independently and agree on only 4
    with pytest.warns(SpeedupWarning) as caught:
        small = compressor.apply_speedup()
    assert sorted(str(w.message).split(";")[0] for w in caught) == [
        "conv1: mask removes 8 of 16 output channels", "layer1.0.conv2: mask removes 8 of 16 output channels",
        "layer2.0.conv2: mask removes 16 of 32 output channels"]
    assert "0 removed (its channels are coupled with ['layer2.0.downsample.0']" in str(caught[-1].message)
    assert len(compressor.speedup_warnings) == 3
    assert compressor.speedup_applied and compressor.model is small
    kept = compressor.kept_channels
    assert len(kept["layer1.0.conv1"]["out"]) == 12 and len(kept["layer2.0.conv1"]["out"]) == 24
    # the excluded layer keeps all its filters and their weights; only the inputs its source dropped go
    assert kept["layer2.0.downsample.0"]["out"] == list(range(32)) and small.layer2[0].downsample[0].out_channels == 32
    kept_in = kept["layer2.0.downsample.0"]["in"]
    assert len(kept_in) == 12  # the stem/layer1 stream: conv1 and layer1.0.conv2 agree on 4 dropped channels
    assert torch.equal(small.layer2[0].downsample[0].weight, excluded_weight[:, kept_in])
    assert count_parameters(small) < count_parameters(base)
    assert count_macs(small, x) < count_macs(base, x)
    with torch.no_grad():
        torch.testing.assert_close(small(x), masked_out, atol=1e-5, rtol=1e-5)

    written = compressor.export_model("model.safetensors", "mask.safetensors", speedup=True, folder_name=tmp_path / "o")
    assert written == {"model": tmp_path / "o" / "model.safetensors", "mask": tmp_path / "o" / "mask.safetensors",
                       "kept_channels": tmp_path / "o" / "model.kept_channels.json"}
    record = json.loads(written["kept_channels"].read_text())
    assert record == kept
    fresh = zoo.build("resnet_tiny", **model.slimkit_zoo_kwargs)
    apply_kept_channels(fresh, record)
    fresh.load_state_dict(load_file(written["model"]), strict=True)
    fresh.eval()
    with torch.no_grad():
        assert torch.equal(fresh(x), small(x))
    assert set(load_masks(written["mask"])) == set(masks)
    again = load_compressed_model(zoo.build("resnet_tiny", **model.slimkit_zoo_kwargs), written["model"]).eval()
    with torch.no_grad():
        assert torch.equal(again(x), small(x))


def test_l1_filter_with_an_input_shrinks_the_residual_stream():
    """Given dummy_input, the experiment's l1_filter is dependency-aware, like the SmashConfig face."""
    model, x = zoo.load("resnet_tiny", batch_size=2, image_size=16)
    base_params, base_macs = count_parameters(model), count_macs(model, x)
    config = {"compressor": "l1_filter", "config_list": [{"sparsity": 0.5, "op_types": ["Conv2d"]}]}
    compressor = create_compressor(model, config, dummy_input=x[:1])
    assert compressor.engine.dependency_aware
    compressor.compress()
    small = compressor.apply_speedup()
    assert compressor.speedup_warnings == []
    assert small.conv1.out_channels == 8 and small.layer1[0].conv2.out_channels == 8
    assert small.layer2[0].conv2.out_channels == 16 and small.layer2[0].downsample[0].out_channels == 16
    assert small.fc.in_features == 16
    assert base_macs / count_macs(small, x) > 3.5
    assert base_params / count_parameters(small) > 3.0


def test_digits_export_without_speedup_then_with(tmp_path):
    model, x = zoo.load("digits_cnn", batch_size=16)
    job = {"compression_framework": "torch", "compression_type": "pruning", "compressor": "L1FilterPruner",
           "config_list": [{"sparsity": 0.5, "op_types": ["Conv2d"]}], "folder_name": None, "save_model": True}
    compressor = create_compressor(model, job)
    compressor.compress()
    with torch.no_grad():
        masked_out = compressor.model(x)
    written = compressor.export_model("plain.safetensors", "plain_mask.safetensors", folder_name=tmp_path)
    assert written["kept_channels"] is None
    fresh = zoo.build("digits_cnn").eval()
    fresh.load_state_dict(load_file(tmp_path / "plain.safetensors"), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(fresh(x), masked_out, atol=1e-5, rtol=1e-5)
    # speedup=True applies the speedup when it has not run yet. The trained BatchNorms after the pruned convs
    # emit a constant shift on masked channels, which the shrunk model no longer has: outputs move (as in NNI).
    written = compressor.export_model(tmp_path / "small.safetensors", speedup=True, dummy_input=x[:1])
    assert compressor.speedup_applied and written["mask"] is None
    assert written["kept_channels"] == tmp_path / "small.kept_channels.json"
    assert [m.out_channels for m in compressor.model.features if isinstance(m, torch.nn.Conv2d)] == [16, 32, 64]
    loaded = load_compressed_model(zoo.build("digits_cnn"), written["model"]).eval()
    with torch.no_grad():
        assert torch.equal(loaded(x), compressor.model(x))


def test_slim_batchnorm_masks_shrink_their_convs():
    model, x = zoo.load("digits_cnn", batch_size=16)
    base_params = count_parameters(model)
    compressor = create_compressor(model, "slim", config_list=[{"sparsity": 0.5, "op_names": ["features.1",
                                                                                              "features.5"]}])
    masked = compressor.compress()
    with torch.no_grad():
        masked_out = masked(x)
    small = compressor.apply_speedup(dummy_input=x[:1])
    assert small.features[0].out_channels + small.features[4].out_channels == 48  # 96 channels, half pruned
    assert small.features[8].out_channels == 128
    assert count_parameters(small) < base_params
    with torch.no_grad():
        torch.testing.assert_close(small(x), masked_out, atol=1e-5, rtol=1e-5)


def test_optimizer_is_restored_after_speedup():
    model, x = zoo.load("resnet_tiny", batch_size=2, image_size=16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    compressor = create_compressor(model, "L1FilterPruner", optimizer=opt, dummy_input=x[:1],
                                   config_list=[{"sparsity": 0.5, "op_types": ["Conv2d"]}])
    compressor.compress()
    assert "step" in vars(opt)  # the pruner hooks step() while it is attached
    compressor.apply_speedup()
    assert "step" not in vars(opt)
