"""Pruner base: wrappers, masks in forward, collectors, optimizer hook, unwrap, export / load."""

from __future__ import annotations

import copy
import json
import struct

import pytest
import torch
from torch import nn

from slimkit.engines.pruning import (
    L1FilterPruner,
    LevelEngine,
    Pruner,
    PrunerModuleWrapper,
    PruningConfigError,
    WeightMasker,
    load_masks,
    load_state_dict_file,
)
from slimkit.errors import SaveLoadError


def zero_filters(mask: torch.Tensor) -> int:
    return int((mask.reshape(mask.shape[0], -1).sum(dim=1) == 0).sum())


def test_wrappers_replace_layers_and_masks_are_buffers(convnet):
    pruner = L1FilterPruner(convnet, [{"sparsity": 0.5}])
    assert [w.name for w in pruner.get_modules_wrapper()] == ["conv1", "conv2", "fc"]
    assert isinstance(convnet.conv1, PrunerModuleWrapper) and isinstance(convnet.conv1.module, nn.Conv2d)
    assert "conv1.weight_mask" in convnet.state_dict() and "conv1.bias_mask" in convnet.state_dict()
    assert "weight_mask" in dict(convnet.conv1.named_buffers())
    with pytest.raises(PruningConfigError, match="already wrapped by a pruner"):
        LevelEngine(convnet, [{"sparsity": 0.5}])


def test_forward_uses_masks_and_weights_stay_untouched(convnet, digits):
    x = digits[0][:16]
    original = copy.deepcopy(convnet)
    pruner = L1FilterPruner(convnet, [{"sparsity": 0.5}])
    model = pruner.compress()
    assert model is convnet
    for name in ("conv1", "conv2", "fc"):
        assert torch.equal(convnet.get_submodule(name).module.weight, original.get_submodule(name).weight)
        assert torch.equal(convnet.get_submodule(name).module.bias, original.get_submodule(name).bias)
    assert torch.equal(convnet.conv1.module.weight, original.conv1.weight)
    assert torch.equal(convnet.fc.module.bias, original.fc.bias)
    # the wrapped forward equals a plain copy with the masks multiplied in
    reference = copy.deepcopy(original)
    masks = pruner.get_masks()
    with torch.no_grad():
        for name, m in masks.items():
            layer = reference.get_submodule(name)
            layer.weight.mul_(m["weight_mask"])
            layer.bias.mul_(m["bias_mask"])
    assert torch.allclose(convnet(x), reference(x), atol=1e-6)
    assert not torch.allclose(convnet(x), original(x), atol=1e-3)
    # the masked conv1 channels really output zero before BN
    pruned = (masks["conv1"]["weight_mask"].reshape(8, -1).sum(1) == 0).nonzero().flatten()
    assert torch.count_nonzero(convnet.conv1(x)[:, pruned]) == 0


def test_get_masks_matches_unwrapped_model(convnet):
    pruner = L1FilterPruner(convnet, [{"sparsity": 0.5}])
    pruner.compress()
    masks = pruner.get_masks()
    plain = pruner.unwrap_model()
    assert not any(isinstance(m, PrunerModuleWrapper) for m in plain.modules())
    assert set(masks) == {"conv1", "conv2", "fc"}
    for name, layer_masks in masks.items():
        layer = plain.get_submodule(name)
        assert layer_masks["weight_mask"].shape == layer.weight.shape
        assert layer_masks["bias_mask"].shape == layer.bias.shape
    assert [zero_filters(masks[n]["weight_mask"]) for n in ("conv1", "conv2", "fc")] == [4, 8, 5]
    # get_masks hands out copies
    masks["conv1"]["weight_mask"].zero_()
    assert zero_filters(pruner.get_masks()["conv1"]["weight_mask"]) == 4


def test_unwrap_with_and_without_applying_masks(convnet):
    before = convnet.conv2.weight.detach().clone()
    pruner = L1FilterPruner(convnet, [{"sparsity": 0.5, "op_names": ["conv2"]}])
    pruner.compress()
    assert torch.equal(pruner.unwrap_model().conv2.weight, before)
    pruner._wrap_model()
    mask = pruner.get_masks()["conv2"]["weight_mask"]
    plain = pruner.unwrap_model(apply_masks=True)
    assert torch.equal(plain.conv2.weight, before * mask)
    assert zero_filters(plain.conv2.weight) == 8


def test_set_wrappers_attribute(convnet):
    pruner = LevelEngine(convnet, [{"sparsity": 0.5}])
    pruner.set_wrappers_attribute("seen", [])
    pruner.set_wrappers_attribute("score", torch.zeros(3))
    wrappers = pruner.get_modules_wrapper()
    wrappers[0].seen.append(1)
    assert wrappers[1].seen == []
    assert "score" in dict(wrappers[0].named_buffers())
    wrappers[0].score += 1
    assert torch.equal(wrappers[1].score, torch.zeros(3))


def test_activation_collectors_add_and_remove(convnet, digits):
    pruner = L1FilterPruner(convnet, [{"sparsity": 0.5}])
    pruner.set_wrappers_attribute("collected_activation", [])

    def collector(wrapper, inputs, output):
        wrapper.collected_activation.append(torch.relu(output.detach()))

    cid = pruner.add_activation_collector(collector)
    convnet(digits[0][:4])
    shapes = [tuple(w.collected_activation[0].shape) for w in pruner.get_modules_wrapper()]
    assert shapes == [(4, 8, 8, 8), (4, 16, 8, 8), (4, 10)]
    second = pruner.add_activation_collector(lambda w, i, o: w.collected_activation.append(None))
    assert second != cid
    pruner.remove_activation_collector(cid)
    convnet(digits[0][:4])
    assert [len(w.collected_activation) for w in pruner.get_modules_wrapper()] == [2, 2, 2]
    assert pruner.get_modules_wrapper()[0].collected_activation[1] is None
    pruner.remove_activation_collector(second)
    convnet(digits[0][:4])
    assert len(pruner.get_modules_wrapper()[0].collected_activation) == 2
    with pytest.raises(PruningConfigError, match=r"No activation collector with id 99; active ids: \[\]"):
        pruner.remove_activation_collector(99)


def test_training_through_optimizer_keeps_pruned_weights_zero(convnet, digit_batches):
    convnet.train()
    optimizer = torch.optim.SGD(convnet.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    original_step = optimizer.step
    pruner = L1FilterPruner(convnet, [{"sparsity": 0.5}], optimizer)
    pruner.compress()
    masks = pruner.get_masks()
    before = convnet.conv2.module.weight.detach().clone()
    for x, y in digit_batches * 2:
        optimizer.zero_grad()
        nn.functional.cross_entropy(convnet(x), y).backward()
        pruned = masks["conv2"]["weight_mask"] == 0
        assert torch.count_nonzero(convnet.conv2.module.weight.grad[pruned]) == 0
        optimizer.step()
        for wrapper in pruner.get_modules_wrapper():
            mask = masks[wrapper.name]["weight_mask"]
            assert torch.count_nonzero(wrapper.module.weight[mask == 0]) == 0
            assert torch.count_nonzero(wrapper.module.bias[masks[wrapper.name]["bias_mask"] == 0]) == 0
    assert pruner.step_count == 8
    assert not torch.equal(convnet.conv2.module.weight, before)  # training did change the kept weights
    assert all(torch.equal(pruner.get_masks()[n]["weight_mask"], masks[n]["weight_mask"]) for n in masks)
    pruner.unwrap_model()
    assert "step" not in optimizer.__dict__ and optimizer.step == original_step


def test_custom_masker_and_pruner(mlp):
    class FirstRowsMasker(WeightMasker):
        def calc_mask(self, sparsity, wrapper, wrapper_idx=None):
            mask = torch.ones_like(wrapper.weight_mask)
            mask[: int(sparsity * mask.shape[0])] = 0
            return {"weight_mask": mask}

    class FirstRowsPruner(Pruner):
        def __init__(self, model, config_list, optimizer=None):
            super().__init__(model, config_list, optimizer)
            self.masker = FirstRowsMasker(model, self)

    pruner = FirstRowsPruner(mlp, [{"sparsity": 0.25, "op_types": ["Linear"]}])
    pruner.compress()
    masks = pruner.get_masks()
    assert zero_filters(masks["fc1"]["weight_mask"]) == 8
    assert torch.equal(masks["fc1"]["bias_mask"], torch.ones(32))  # bias untouched when not returned
    assert all(w.if_calculated for w in pruner.get_modules_wrapper())


def test_export_and_load_round_trip(convnet, digits, tmp_path):
    x = digits[0][:8]
    pristine = copy.deepcopy(convnet)
    pruner = L1FilterPruner(convnet, [{"sparsity": 0.5}])
    pruner.compress()
    expected = convnet(x)
    pruner.export_model(tmp_path / "model.safetensors", tmp_path / "mask.safetensors")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mask.safetensors", "model.safetensors"]
    state = load_state_dict_file(tmp_path / "model.safetensors")
    assert set(state) == set(pristine.state_dict())
    pristine.load_state_dict(state)
    assert torch.allclose(pristine(x), expected, atol=1e-6)
    # safetensors header (JSON) carries our format tag: no pickle involved
    raw = (tmp_path / "mask.safetensors").read_bytes()
    header = json.loads(raw[8 : 8 + struct.unpack("<Q", raw[:8])[0]])
    assert header["__metadata__"] == {"format": "slimkit-pruning-masks"}
    loaded = load_masks(tmp_path / "mask.safetensors")
    for name, masks in pruner.get_masks().items():
        assert torch.equal(loaded[name]["weight_mask"], masks["weight_mask"])
        assert torch.equal(loaded[name]["bias_mask"], masks["bias_mask"])
    # a fresh pruner takes the masks and does not recompute them
    fresh_model = copy.deepcopy(pristine)
    fresh = LevelEngine(fresh_model, [{"sparsity": 0.9, "op_names": ["conv1", "conv2", "fc"]}])
    fresh.load_masks(tmp_path / "mask.safetensors")
    fresh.compress()
    assert all(torch.equal(fresh.get_masks()[n]["weight_mask"], loaded[n]["weight_mask"]) for n in loaded)


def test_load_masks_errors(convnet, tmp_path):
    with pytest.raises(SaveLoadError, match="does not exist"):
        load_masks(tmp_path / "missing.safetensors")
    (tmp_path / "bad.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(SaveLoadError, match="is not a readable safetensors file"):
        load_masks(tmp_path / "bad.safetensors")
    pruner = L1FilterPruner(convnet, [{"sparsity": 0.5, "op_names": ["conv1"]}])
    with pytest.raises(PruningConfigError, match="'conv2', which this pruner does not wrap; wrapped layers: conv1"):
        pruner.apply_masks({"conv2": {"weight_mask": torch.ones(16, 8, 3, 3)}})
    with pytest.raises(PruningConfigError, match=r"weight_mask for layer 'conv1' has shape \(8,\); the layer needs"):
        pruner.apply_masks({"conv1": {"weight_mask": torch.ones(8)}})


def test_export_onnx_matches_masked_model(convnet, digits, tmp_path):
    import onnxruntime as ort
    pruner = L1FilterPruner(convnet, [{"sparsity": 0.5}])
    pruner.compress()
    with pytest.raises(PruningConfigError, match="needs input_shape"):
        pruner.export_model(tmp_path / "m.safetensors", onnx_path=tmp_path / "m.onnx")
    pruner.export_model(tmp_path / "m.safetensors", onnx_path=tmp_path / "m.onnx", input_shape=(1, 1, 8, 8))
    session = ort.InferenceSession(str(tmp_path / "m.onnx"))
    x = digits[0][:1]
    (out,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    assert torch.allclose(torch.from_numpy(out), convnet(x), atol=1e-5)
    assert isinstance(convnet.conv1, PrunerModuleWrapper)  # export leaves the pruner attached


def test_failed_construction_leaves_model_unwrapped(convnet):
    from slimkit.engines.pruning import AGPEngine, SlimEngine

    with pytest.raises(PruningConfigError, match="needs one sparsity"):
        SlimEngine(convnet, [{"sparsity": 0.5}, {"sparsity": 0.25, "op_names": ["bn2"]}])
    with pytest.raises(PruningConfigError, match="is below initial_sparsity"):
        AGPEngine(convnet, [{"sparsity": 0.1}], initial_sparsity=0.2)
    with pytest.raises(PruningConfigError, match="op_name 'nope'"):
        L1FilterPruner(convnet, [{"sparsity": 0.5}, {"sparsity": 0.5, "op_names": ["nope"]}])
    assert not any(isinstance(m, PrunerModuleWrapper) for m in convnet.modules())
