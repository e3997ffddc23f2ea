"""SingleTeacherDistill(teacher_ckpt=...): teacher weights from a safetensors file or a saved folder, no pickle."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from slimkit import SmashConfig, smash, zoo
from slimkit.errors import ConfigError, SaveLoadError
from slimkit.razor import SingleTeacherDistill, build, export_subnet, save_subnet
from slimkit.zoo.digits_cnn import digits_split

KL = dict(
    student_recorders=dict(fc=dict(type="ModuleOutputs", source="classifier.3")),
    teacher_recorders=dict(fc=dict(type="ModuleOutputs", source="classifier.3")),
    distill_losses=dict(loss_kl=dict(type="KLDivergence", tau=4)),
    loss_forward_mappings=dict(loss_kl=dict(preds_S=dict(from_student=True, recorder="fc"),
                                            preds_T=dict(from_student=False, recorder="fc"))))
ARCH = dict(type="ZooModel", name="digits_cnn", pretrained=False)


@pytest.fixture(scope="module")
def trained():
    return zoo.load("digits_cnn").model.eval()


@pytest.fixture(scope="module")
def x():
    return digits_split()[2][:16]


def _build(**kwargs) -> SingleTeacherDistill:
    return build(dict(type="SingleTeacherDistill", architecture=ARCH, distiller=KL, **kwargs))


def test_weights_from_a_safetensors_file(tmp_path, trained, x):
    save_file(trained.state_dict(), str(tmp_path / "teacher.safetensors"))
    algo = _build(teacher=ARCH, teacher_ckpt=str(tmp_path / "teacher.safetensors"))
    for name, tensor in trained.state_dict().items():
        assert torch.equal(algo.teacher.state_dict()[name], tensor), name
    assert torch.equal(algo.teacher(x), trained(x))
    assert not algo.teacher.training and not any(p.requires_grad for p in algo.teacher.parameters())
    untrained = _build(teacher=ARCH)  # without the checkpoint: random weights, other outputs
    assert not torch.allclose(untrained.teacher(x), trained(x))


def test_a_slimkit_save_folder_is_the_teacher_or_fills_one(tmp_path, trained, x):
    smashed = smash(trained, SmashConfig({"level": {"sparsity": 0.9}}), verbose=False)  # unlike the dense model
    smashed.save_pretrained(tmp_path / "sparse")
    expected = smashed.model.eval()(x)
    alone = _build(teacher_ckpt=str(tmp_path / "sparse"))  # teacher=None: the saved model itself
    torch.testing.assert_close(alone.teacher(x), expected, atol=0, rtol=0)
    filled = _build(teacher=ARCH, teacher_ckpt=tmp_path / "sparse")
    torch.testing.assert_close(filled.teacher(x), expected, atol=0, rtol=0)
    assert not torch.allclose(expected, trained(x))


def test_a_folder_of_safetensors_files(tmp_path, x):
    arch = dict(type="SearchableCNN", stage_widths=[[4, 8]], strides=[1], kernel_choices=[3], depth_choices=[0])
    spos = build(dict(type="SPOS", architecture=arch))
    choice = {"stages.0.width": 8, "stages.0.first": "k3"}
    subnet = save_subnet(spos, tmp_path / "subnet", choice)  # subnet.json, architecture.json, model.safetensors
    plain = export_subnet(build(dict(type="SPOS", architecture=arch)), choice)  # same layers, other weights
    assert not torch.allclose(plain(x), subnet(x))
    algo = SingleTeacherDistill(nn.Sequential(nn.Flatten(), nn.Linear(64, 10)), plain, dict(
        student_recorders={}, teacher_recorders={}, distill_losses={}, loss_forward_mappings={}),
        teacher_ckpt=tmp_path / "subnet")
    torch.testing.assert_close(algo.teacher(x), subnet(x), atol=0, rtol=0)


def test_a_shape_mismatch_names_the_tensor_and_both_shapes(tmp_path, trained):
    state = dict(trained.state_dict())
    state["features.4.weight"] = torch.zeros(16, 32, 3, 3)
    save_file(state, str(tmp_path / "bad.safetensors"))
    with pytest.raises(ConfigError) as err:
        _build(teacher=ARCH, teacher_ckpt=str(tmp_path / "bad.safetensors"))
    assert "tensor 'features.4.weight' has shape (16, 32, 3, 3) in the checkpoint but (64, 32, 3, 3) in the " \
           "teacher (DigitsCNN)" in str(err.value)


def test_missing_and_extra_tensors_are_named(tmp_path, trained):
    state = {k: v for k, v in trained.state_dict().items() if k != "classifier.3.bias"}
    state["head.weight"] = torch.zeros(2)
    save_file(state, str(tmp_path / "partial.safetensors"))
    with pytest.raises(ConfigError) as err:
        _build(teacher=ARCH, teacher_ckpt=str(tmp_path / "partial.safetensors"))
    assert "the teacher's 'classifier.3.bias' missing from it; 'head.weight' that the teacher does not have" \
        in str(err.value)


def test_bad_paths(tmp_path):
    with pytest.raises(ConfigError, match=r"teacher_ckpt='.*nowhere' does not exist\. Give a \.safetensors file"):
        _build(teacher=ARCH, teacher_ckpt=str(tmp_path / "nowhere"))
    (tmp_path / "model.pt").write_bytes(b"\x80\x04pickle")
    with pytest.raises(ConfigError, match=r"is a \.pt file; slimkit reads no pickle"):
        _build(teacher=ARCH, teacher_ckpt=tmp_path / "model.pt")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hi")
    with pytest.raises(ConfigError, match=r"holds no smash_config\.json, config\.json or \.safetensors file "
                                          r"\(found: notes\.txt\)"):
        _build(teacher=ARCH, teacher_ckpt=tmp_path / "empty")
    (tmp_path / "broken.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(SaveLoadError, match="is not a readable safetensors file"):
        _build(teacher=ARCH, teacher_ckpt=tmp_path / "broken.safetensors")


def test_weights_only_need_a_teacher_architecture(tmp_path, trained):
    save_file(trained.state_dict(), str(tmp_path / "teacher.safetensors"))
    with pytest.raises(ConfigError, match="holds weights only; pass teacher="):
        _build(teacher_ckpt=tmp_path / "teacher.safetensors")
    with pytest.raises(ConfigError, match=r"needs teacher= \(a module or config dict\) or teacher_ckpt="):
        _build()
