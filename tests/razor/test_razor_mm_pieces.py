"""Small MMEngine-shaped pieces: ImgDataPreprocessor, the Accuracy evaluator, per-pixel cross-entropy, init_cfg."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from slimkit.errors import ConfigError
from slimkit.evaluation import Accuracy
from slimkit.razor import BaseAlgorithm, ImgDataPreprocessor, build
from slimkit.training.losses import cross_entropy


def test_img_data_preprocessor_normalises_flips_and_pads():
    pre = build(dict(type="ImgDataPreprocessor", mean=[1.0, 2.0, 3.0], std=[2.0, 2.0, 2.0], bgr_to_rgb=True,
                     pad_size_divisor=4))
    x = torch.arange(3.0).view(1, 3, 1, 1).expand(1, 3, 3, 3)  # channels 0, 1, 2
    out = pre(x)
    assert out.shape == (1, 3, 4, 4) and float(out[0, 0, 0, 0]) == pytest.approx((2 - 1) / 2)  # flipped, then norm
    assert float(out[0, 0, 3, 3]) == 0.0  # padding
    with pytest.raises(ConfigError, match="3 channel means but the images have 1 channels.*data_preprocessor=None"):
        pre(torch.rand(2, 1, 4, 4))
    with pytest.raises(ConfigError, match="cannot both be True"):
        ImgDataPreprocessor(bgr_to_rgb=True, rgb_to_bgr=True)


def test_accuracy_reports_top_k_in_percent():
    model = torch.nn.Identity()
    logits = torch.tensor([[3.0, 2.0, 1.0], [1.0, 3.0, 2.0], [1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
    labels = torch.tensor([0, 2, 0, -100])  # hit, second, third; one ignored
    metrics = build(dict(_scope_="mmcls", type="Accuracy", topk=(1, 2)))(model, [(logits, labels)])
    assert metrics == {"accuracy/top1": pytest.approx(100 / 3), "accuracy/top2": pytest.approx(200 / 3)}
    with pytest.raises(Exception, match="k may not exceed the number of classes"):
        Accuracy(topk=(5,))(model, [(logits, labels)])


def test_cross_entropy_scores_dense_logits_per_pixel():
    logits, targets = torch.randn(2, 4, 3, 5), torch.randint(4, (2, 3, 5))
    targets[0, 0, 0] = -100
    assert float(cross_entropy(logits, targets)) == pytest.approx(float(F.cross_entropy(logits, targets,
                                                                                        ignore_index=-100)))
    tokens, ids = torch.randn(2, 6, 9), torch.randint(9, (2, 6))  # token logits keep their meaning
    assert float(cross_entropy(tokens, ids)) == pytest.approx(float(F.cross_entropy(tokens.reshape(-1, 9),
                                                                                     ids.reshape(-1))))


def test_init_cfg_loads_a_safetensors_checkpoint_by_name(tmp_path, caplog):
    torch.manual_seed(0)
    source = BaseAlgorithm(torch.nn.Linear(3, 2))
    save_file(source.state_dict(), tmp_path / "algo.safetensors")
    loaded = build(dict(type="BaseAlgorithm", architecture=torch.nn.Linear(3, 2),
                        init_cfg=dict(type="Pretrained", checkpoint=str(tmp_path / "algo.safetensors"))))
    assert torch.equal(loaded.architecture.weight, source.architecture.weight)
    save_file({"architecture.weight": torch.zeros(5, 5)}, tmp_path / "bad.safetensors")
    with pytest.raises(ConfigError, match="does not fit BaseAlgorithm"):
        BaseAlgorithm(torch.nn.Linear(3, 2), init_cfg=dict(type="Pretrained", checkpoint=str(tmp_path /
                                                                                          "bad.safetensors")))
    BaseAlgorithm(torch.nn.Linear(3, 2), init_cfg=dict(type="Pretrained", checkpoint="https://x/y.pth"))
