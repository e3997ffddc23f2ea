"""Configs of the distillers with extra moving parts: CRD's memory bank, factor transfer's two stages, and
data-free distillation (DAFL, ZSKT), whose generators make the training images."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from slimkit.errors import ConfigError
from slimkit.razor import (
    DAFLDataFreeDistillation,
    DataFreeDistillation,
    batch_loss,
    build,
    load_config,
    separate_optimizers,
)
from slimkit.training import fit
from slimkit.training.distill import CRDConnector, Paraphraser, Translator
from tests.faces.mmrazor.mm_models import images, resnet, trains

CLS = Path(__file__).parent / "configs" / "distill" / "cls"
DATAFREE = Path(__file__).parent / "configs" / "distill" / "datafree"


def test_crd_config_replaces_the_loaders_and_trains_on_indexed_samples():
    cfg = load_config(CLS / "crd_contrastive_neck.py")
    # _delete_=True replaced the runtime base's loaders: nothing of theirs is left but what this file wrote
    assert set(cfg.train_dataloader) == {"batch_size", "dataset", "sampler"}
    assert cfg.train_dataloader.dataset.type == "CRDDataset" and cfg.train_dataloader.dataset.neg_num == 24
    assert cfg.val_cfg == {"type": "mmrazor.SingleTeacherDistillValLoop"}
    assert cfg.optim_wrapper.optimizer.type == "SGD"  # kept from configs/_base_/cls_runtime.py
    assert cfg.model.type == "SingleTeacherDistill" and cfg.model.teacher.pretrained is True  # merged pair
    assert cfg.val_dataloader.dataset.dataset.test_mode is True
    algo = build(cfg.model, architecture=resnet(18, cifar=True), teacher=resnet(50, cifar=True, seed=1))
    embed_s, embed_t = algo.distiller.connectors["embed_s"], algo.distiller.connectors["embed_t"]
    assert isinstance(embed_s, CRDConnector)
    assert embed_s(torch.rand(3, 128)).shape == embed_t(torch.rand(3, 512)).shape == (3, 16)
    data = [(x[:, :, :8, :8], {"labels": y, "sample_idx": torch.arange(4) + 4 * i})
            for i, (x, y) in enumerate(images())]
    teacher_embedding = embed_t.linear.weight.detach().clone()
    trains(algo, data, {"student.loss", "distill.loss_contrast"})
    assert not torch.equal(teacher_embedding, embed_t.linear.weight)  # the teacher's projection trains too
    with pytest.raises(ConfigError, match="CRDLoss needs each sample's index"):
        algo(*images(1)[0], mode="loss")  # plain labels: no indices for the memory bank


def test_factor_transfer_pretrains_the_paraphraser_then_trains_the_student(tmp_path):
    pretrain = load_config(CLS / "ft_paraphraser_pretrain.py")
    student, teacher = resnet(18, cifar=True), resnet(50, cifar=True, seed=1)
    algo = build(pretrain.model, architecture=student, teacher=teacher)
    paraphraser = algo.distiller.connectors["paraphrase"]
    assert isinstance(paraphraser, Paraphraser) and paraphraser.phase == "pretrain"
    data = [(x[:2, :, :8, :8], y[:2]) for x, y in images()]
    assert all(not p.requires_grad for p in student.parameters())  # student_trainable=False
    before = [p.detach().clone() for p in paraphraser.parameters()]
    with torch.no_grad():
        first = float(algo(*data[0], mode="loss")["distill.loss_reconstruct"])
    assert set(algo(*data[0], mode="loss")) == {"distill.loss_reconstruct"}  # no student loss
    fit(algo, data[:1], loss=batch_loss, steps=6, lr=3e-3, progress=False, seed=0, num_threads=1)
    with torch.no_grad():
        assert float(algo(*data[0], mode="loss")["distill.loss_reconstruct"]) < first  # it learns to reconstruct
    assert any(not torch.equal(a, b) for a, b in zip(before, paraphraser.parameters(), strict=True))
    save_file({k: v.contiguous() for k, v in algo.state_dict().items()}, tmp_path / "stage1.safetensors")

    train = load_config(CLS / "ft_translator_train.py")
    assert train.model.distiller.connectors.paraphrase.phase == "train"  # merged over stage 1's connector
    assert train.model.distiller.connectors.paraphrase.in_channel == 512
    assert set(train.model.distiller.distill_losses) == {"loss_reconstruct", "loss_factor"}
    assert set(train.model.distiller.loss_forward_mappings) == {"loss_factor"}
    assert train.train_cfg == {"by_epoch": True, "max_epochs": 40}
    train.model.init_cfg.checkpoint = str(tmp_path / "stage1.safetensors")  # the URL is not fetched
    algo = build(train.model, architecture=resnet(18, cifar=True), teacher=teacher)
    loaded = algo.distiller.connectors["paraphrase"]
    assert torch.equal(loaded.encoder[0].weight, paraphraser.encoder[0].weight)  # stage 1's weights
    translator = algo.distiller.connectors["translate"]
    assert isinstance(translator, Translator)
    assert translator(torch.rand(2, 128, 1, 1)).shape == loaded(torch.rand(2, 512, 1, 1)).shape == (2, 32, 1, 1)
    trains(algo, data, {"student.loss", "distill.loss_factor"})  # the unmapped reconstruction loss is skipped


def generated_loss(algo: DataFreeDistillation, images: torch.Tensor) -> float:
    """The student's distillation loss on fixed images."""
    with torch.no_grad():
        return float(sum(algo.distill(images, algo.distiller, False).values()))


def test_dafl_config_trains_generator_and_student_with_two_optimizers():
    cfg = load_config(DATAFREE / "dafl_generator.py")
    assert "optimizer" not in cfg.optim_wrapper  # the runtime base's single optimizer was deleted
    assert cfg.train_cfg == {"by_epoch": False, "max_iters": 6000, "val_interval": 200}
    assert cfg.train_dataloader.batch_size == 64 and cfg.train_dataloader.num_workers == 1  # merged, not replaced
    algo = build(cfg.model, architecture=resnet(18, base=8, cifar=True),
                 teacher=resnet(34, base=8, cifar=True, seed=1))
    assert isinstance(algo, DAFLDataFreeDistillation) and list(algo.teachers) == ["wide"]
    assert algo.generator(None, 3).shape == (3, 3, 32, 32)
    optimizers = separate_optimizers(algo, cfg.optim_wrapper)
    assert {k: type(o).__name__ for k, o in optimizers.items()} == {"architecture": "AdamW", "generator": "AdamW"}
    torch.manual_seed(0)
    probe = algo.images(8).detach()
    first = generated_loss(algo, probe)
    for _ in range(6):
        logs = algo.train_step(8, optimizers)
    assert set(logs) == {"generator.loss_onehot", "generator.loss_balance", "generator.loss_activation",
                         "distill.loss_soft"}
    assert all(torch.isfinite(torch.tensor(v)) for v in logs.values())
    assert generated_loss(algo, probe) < first  # the student now imitates the teacher better


def test_zskt_config_trains_adversarially_without_data():
    cfg = load_config(DATAFREE / "zskt_generator.py")
    algo = build(cfg.model, architecture=resnet(18, base=8, cifar=True),
                 teacher=resnet(34, base=8, cifar=True, seed=1), student_iter=2)
    assert type(algo) is DataFreeDistillation and list(algo.teachers) == ["deep"]
    optimizers = separate_optimizers(algo, cfg.optim_wrapper)
    assert {k: type(o).__name__ for k, o in optimizers.items()} == {"architecture": "SGD", "generator": "Adam"}
    student = [p.detach().clone() for p in algo.student.parameters()]
    generator = [p.detach().clone() for p in algo.generator.parameters()]
    torch.manual_seed(0)
    probe = algo.images(4).detach()
    first = generated_loss(algo, probe)
    for _ in range(3):
        logs = algo.train_step(4, optimizers)
    at_losses = {f"distill.loss_at{i}" for i in range(1, 5)}
    assert set(logs) == {"generator.loss_adversarial", "distill.loss_soft", *at_losses}
    assert logs["generator.loss_adversarial"] < 0  # the generator maximises the divergence (weight -1.5)
    assert generated_loss(algo, probe) < first
    assert any(not torch.equal(a, b) for a, b in zip(student, algo.student.parameters(), strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(generator, algo.generator.parameters(), strict=True))
    assert all(not p.requires_grad for p in algo.teachers.parameters())
    losses = algo(torch.zeros(3, 3, 32, 32), mode="loss")  # the student's losses on 3 generated images
    assert set(losses) == {"distill.loss_soft", *at_losses}
