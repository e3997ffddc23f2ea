"""More of MMRazor's distillation configs, as shipped: DAFL, CRD, factor transfer, FBKD, PKD and MGD."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from slimkit.errors import ConfigError
from slimkit.razor import DAFLDataFreeDistillation, batch_loss, build, load_config, separate_optimizers
from slimkit.training import fit
from tests.razor.mm_models import TinyDetector, images, resnet, trains

CONFIGS = Path(__file__).parents[1] / "fixtures" / "mmrazor" / "configs" / "distill"


def test_dafl_config_trains_generator_and_student_on_one_batch():
    cfg = load_config(CONFIGS / "mmcls" / "dafl" / "dafl_logits_resnet34_resnet18_8xb256_cifar10.py")
    cfg.model.generator.hidden_channels = 16  # a smaller generator than the shipped 128 channels, for speed
    algo = build(cfg.model, architecture=resnet(18, base=8, cifar=True),
                 teacher=resnet(34, base=8, cifar=True, seed=1))
    assert isinstance(algo, DAFLDataFreeDistillation)
    optimizers = separate_optimizers(algo, cfg.optim_wrapper)
    assert {type(o).__name__ for o in optimizers.values()} == {"AdamW"}
    logs = algo.train_step(4, optimizers)
    assert set(logs) == {"generator.loss_res34_oh", "generator.loss_res34_ie", "generator.loss_res34_ac",
                         "distill.loss_kl"}


def test_crd_config_trains_with_dataset_indices():
    cfg = load_config(CONFIGS / "mmcls" / "crd" / "crd_neck_r50_r18_8xb16_cifar10.py")
    cfg.model.distiller.distill_losses.loss_crd.update(neg_num=32, sample_n=64)  # a small memory bank
    algo = build(cfg.model, architecture=resnet(18, cifar=True), teacher=resnet(50, cifar=True, seed=1))
    data = [(x[:2, :, :8, :8], {"labels": y[:2], "sample_idx": torch.tensor([2 * i, 2 * i + 1])})
            for i, (x, y) in enumerate(images())]
    teacher_embedding = algo.distiller.connectors["loss_crd_tea"].linear.weight.detach().clone()
    trains(algo, data, {"student.loss", "distill.loss_crd"})
    assert not torch.equal(teacher_embedding, algo.distiller.connectors["loss_crd_tea"].linear.weight)
    with pytest.raises(ConfigError, match="CRDLoss needs each sample's index"):
        algo(*images(1)[0], mode="loss")  # plain labels: no indices for the memory bank


def test_factor_transfer_pretrains_the_paraphraser_then_trains_the_student(tmp_path):
    """Both stages; the connectors' widths are set to the small ResNets' (base 16: 128 and 512 channels)."""
    pretrain = load_config(CONFIGS / "mmcls" / "factor_transfer" /
                           "factor-transfer_backbone_resnet50_resnet18_8xb16_cifar10_pretrain.py")
    connectors = pretrain.model.distiller.connectors
    connectors.loss_s4_sfeat.update(in_channel=128, out_channel=64)
    connectors.loss_s4_tfeat.update(in_channel=512, out_channel=64)
    student, teacher = resnet(18, base=16, cifar=True), resnet(50, base=16, cifar=True, seed=1)
    algo = build(pretrain.model, architecture=student, teacher=teacher)
    paraphraser = algo.distiller.connectors["loss_s4_tfeat"]
    before = [p.detach().clone() for p in paraphraser.parameters()]
    data = [(x[:2, :, :8, :8], y[:2]) for x, y in images()]
    assert set(algo(*data[0], mode="loss")) == {"distill.loss_s4_pretrain"}
    fit(algo, data, loss=batch_loss, steps=2, lr=1e-3, progress=False, seed=0, num_threads=1)
    assert any(not torch.equal(a, b) for a, b in zip(before, paraphraser.parameters(), strict=True))
    assert all(not p.requires_grad for p in student.parameters())  # student_trainable=False
    save_file({k: v.contiguous() for k, v in algo.state_dict().items()}, tmp_path / "pretrain.safetensors")

    train = load_config(CONFIGS / "mmcls" / "factor_transfer" /
                        "factor-transfer_backbone_resnet50_resnet18_8xb16_cifar10_train.py")
    connectors = train.model.distiller.connectors
    assert connectors.loss_s4_tfeat.phase == "train"  # merged over the pretrain config's connector
    connectors.loss_s4_sfeat.update(in_channel=128, out_channel=64)
    connectors.loss_s4_tfeat.update(in_channel=512, out_channel=64)
    train.model.init_cfg.checkpoint = str(tmp_path / "pretrain.safetensors")  # the shipped URL is not fetched
    algo = build(train.model, architecture=resnet(18, base=16, cifar=True), teacher=teacher)
    assert torch.equal(algo.distiller.connectors["loss_s4_tfeat"].encoder[0].weight, paraphraser.encoder[0].weight)
    trains(algo, data, {"student.loss", "distill.loss_s4"})


def test_fbkd_config_trains_both_connectors():
    cfg = load_config(CONFIGS / "mmdet" / "fbkd" / "fbkd_fpn_faster-rcnn_r101_faster-rcnn_r50_1x_coco.py")
    algo = build(cfg.model, architecture=TinyDetector(18), teacher=TinyDetector(34, seed=1))
    trains(algo, images(size=128, batch=2), {"student.loss_cls", *(f"distill.loss_s{i}" for i in range(4))})


@pytest.mark.parametrize("name,levels", [("pkd/pkd_fpn_faster-rcnn_r101_faster-rcnn_r50_2x_coco.py", 4),
                                         ("pkd/pkd_fpn_retina_x101_retina_r50_2x_coco.py", 4)])
def test_pkd_configs_train(name, levels):
    cfg = load_config(CONFIGS / "mmdet" / name)
    algo = build(cfg.model, architecture=TinyDetector(18, out_channels=16),
                 teacher=TinyDetector(34, out_channels=16, seed=1))
    trains(algo, images(size=64, batch=2), {"student.loss_cls", *(f"distill.loss_pkd_fpn{i}" for i in range(levels))})


def test_mgd_config_replaces_a_skipped_base_model():
    cfg = load_config(CONFIGS / "mmdet" / "mgd" / "mgd_fpn_retina_x101_retina_r50_2x_coco.py")
    algo = build(cfg.model, architecture=TinyDetector(18), teacher=TinyDetector(34, seed=1))
    trains(algo, images(size=64, batch=2), {"student.loss_cls", *(f"distill.loss_mgd_fpn{i}" for i in range(5))})
