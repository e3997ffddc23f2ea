"""MMEngine-style .py configs: read without running them, with MMEngine's inheritance rules."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from slimkit.errors import ConfigError
from slimkit.razor import ConfigDict, SkippedBase, build, load_config, skipped_bases


def write(folder, name: str, text: str):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_bases_references_mutation_delete_and_expressions(tmp_path):
    write(tmp_path, "base.py", "import math\nwidth = 8\nmodel = dict(type='KLDivergence', tau=2, loss_weight=1.0)\n"
                               "train = dict(epochs=3, lr=0.1)\nsizes = [2 ** i for i in range(3)]\n")
    child = write(tmp_path, "child.py", (
        "_base_ = ['./base.py']\n"
        "from copy import deepcopy\n"
        "model = dict(tau=4)\n"
        "train = dict(_delete_=True, steps=10)\n"
        "_base_.sizes.append(99)\n"
        "alias = deepcopy(_base_.model)\n"
        "name = f'w{_base_.width * 2}'\n"
        "scaled = {{_base_.width}} // 3 if _base_.width > 4 else 0\n"
        "assert _base_.width == 8, 'width changed'\n"))
    cfg = load_config(child)
    assert isinstance(cfg, ConfigDict) and cfg.model == {"type": "KLDivergence", "tau": 4, "loss_weight": 1.0}
    assert cfg.train == {"steps": 10} and cfg.sizes == [1, 2, 4, 99] and cfg.alias.tau == 2
    assert (cfg.name, cfg.scaled) == ("w16", 2) and "math" not in cfg and "deepcopy" not in cfg
    assert float(build(cfg.model).tau) == 4.0


def test_scoped_bases_are_skipped_with_a_note_and_read_as_placeholders(tmp_path, caplog):
    write(tmp_path, "configs/_base_/own.py", "shared = dict(a=1)\n")
    child = write(tmp_path, "configs/distill/x/child.py", (
        "_base_ = ['mmdet::retinanet/r50.py', 'mmrazor::_base_/own.py']\n"
        "student = _base_.model\n"
        "student.neck.init_cfg = dict(type='Pretrained')\n"
        "student['head'] = 1\n"
        "model = dict(type='SingleTeacherDistill', architecture=student)\n"
        "extra = _base_.shared\n"))
    with caplog.at_level(logging.WARNING):
        cfg = load_config(child)
    assert "Skipped 1 base config(s)" in caplog.text and "mmdet::retinanet/r50.py" in caplog.text
    assert skipped_bases(cfg) == ["mmdet::retinanet/r50.py"]
    assert cfg.extra == {"a": 1}  # mmrazor:: found in the configs/ folder above
    assert cfg.model.architecture == SkippedBase(("mmdet::retinanet/r50.py",), "model")
    with pytest.raises(ConfigError, match=r"architecture is <_base_.model from the skipped base mmdet::retinanet/"
                                          r"r50.py>.*architecture=your_model"):
        build(cfg.model, teacher=None)
    write(tmp_path, "mmdet/retinanet/r50.py", "model = dict(neck=dict(depth=50))\n")  # or read it from a folder
    cfg = load_config(child, scope_roots={"mmdet": tmp_path / "mmdet"})
    assert cfg.model.architecture == {"neck": {"depth": 50, "init_cfg": {"type": "Pretrained"}}, "head": 1}


def test_arithmetic_on_a_skipped_base_value_is_a_placeholder_too(tmp_path):
    # MMRazor's GroupFisher prune configs scale the skipped mmcls schedule's learning rate and extend its hooks
    cfg = load_config(write(tmp_path, "prune.py", (
        "_base_ = ['mmcls::resnet/resnet50_8xb32_in1k.py']\n"
        "lr_ratio = 0.1\n"
        "optim_wrapper = dict(optimizer=dict(lr=_base_.optim_wrapper.optimizer.lr * lr_ratio))\n"
        "custom_hooks = getattr(_base_, 'custom_hooks', []) + [dict(type='mmrazor.PruningStructureHook')]\n"
        "half = 1 / _base_.model.head.num_classes - 2\n")))
    lr = cfg.optim_wrapper.optimizer.lr
    assert isinstance(lr, SkippedBase) and lr.path == "(optim_wrapper.optimizer.lr * 0.1)"
    assert lr.sources == ("mmcls::resnet/resnet50_8xb32_in1k.py",)
    assert cfg.custom_hooks == [{"type": "mmrazor.PruningStructureHook"}]  # getattr's default: MMRazor's own hooks
    assert cfg.half.path == "((1 / model.head.num_classes) - 2)"
    with pytest.raises(ConfigError, match=r"optim_wrapper\.optimizer\.lr \* 0\.1"):
        build(dict(type="KLDivergence", tau=lr))


@pytest.mark.parametrize("text,message", [
    ("import os\nx = os.getcwd()\n", "the config imports 'os'.*allows only: copy, math"),
    ("from subprocess import run\n", "imports 'subprocess'"),
    ("x = __import__('os')\n", "calling '__import__' is not allowed in a config"),
    ("x = ().__class__\n", "attribute '__class__' is not allowed"),
    ("x = open('/tmp/slimkit_config_must_not_write', 'w')\n", "bad.py:1: calling 'open' is not allowed"),
    ("f = lambda: 1\n", "may not contain Lambda"),
    ("def f():\n    return 1\n", "may not contain a FunctionDef statement"),
    ("for i in range(3):\n    x = i\n", "may not contain a For statement"),
    ("x = 'a' * 10 ** 9\n", "a repeated sequence this long"),
    ("x = 2 ** 10 ** 5\n", "exponent 100000 is too large"),
    ("x = 'abc'.encode()\n", "cannot read 'encode' of a str"),
    ("with open('x') as f:\n    pass\n", "'with' blocks"),
    ("assert 1 == 2, 'nope'\n", "the config's assertion failed: nope"),
])
def test_configs_are_read_never_run(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, "bad.py", text))
    assert not Path("/tmp/slimkit_config_must_not_write").exists()


def test_mmengine_rules_for_bases(tmp_path):
    write(tmp_path, "a.py", "x = 1\n")
    write(tmp_path, "b.py", "x = 2\n")
    with pytest.raises(ConfigError, match=r"'./b.py' defines \['x'\], which an earlier _base_"):
        load_config(write(tmp_path, "c.py", "_base_ = ['./a.py', './b.py']\n"))
    with pytest.raises(ConfigError, match="cycle"):
        load_config(write(tmp_path, "loop.py", "_base_ = './loop.py'\n"))
    with pytest.raises(ConfigError, match=r"missing.py \(a _base_ of .*d.py\) does not exist"):
        load_config(write(tmp_path, "d.py", "_base_ = ['./missing.py']\n"))
    with pytest.raises(ConfigError, match="no key 'y' here"):
        load_config(write(tmp_path, "e.py", "_base_ = ['./a.py']\nz = _base_.y\n"))
    with pytest.raises(ConfigError, match=r"e2.py:1: not valid Python"):
        load_config(write(tmp_path, "e2.py", "x = (\n"))


def test_build_types_scopes_and_lazy_nested_configs():
    connector = build(dict(_scope_="mmrazor", type="mmrazor.ConvModuleConnector", in_channel=2, out_channel=3,
                           norm_cfg=dict(type="BN"), act_cfg=None))
    assert type(connector.conv_module[1]).__name__ == "BatchNorm2d"  # norm_cfg reached the connector as a dict
    with pytest.raises(ConfigError, match=r"'ImageClassifier' is a type of MMClassification \(mmcls\), which "
                                          "slimkit does not build"):
        build(dict(_scope_="mmcls", type="ImageClassifier"))
    with pytest.raises(ConfigError, match=r"architecture=dict\(type='ImageClassifier', \.\.\.\) is a model of "
                                          "MMClassification"):
        build(dict(type="SPOS", architecture=dict(_scope_="mmcls", type="ImageClassifier")))
