"""MMRazor's loss families on digits: a small student trained alone vs distilled with each, through slimkit.razor.

    PYTHONPATH=. .venv/bin/python benchmarks/razor_losses_digits.py [--seeds 0 1 2] [--train 0.25] [--epochs 30]
        [--lr 3e-3] [--threads 1] [--only KD DKD ...]

Teacher: the zoo's ``digits_cnn`` (3 conv-BN-ReLU stages, 159.8k parameters, trained on the full train split).
Student: the same layout at 1/8 of the widths (4/8/16 channels, a 32-unit hidden layer; 3.9k parameters),
trained from the same random start per seed on ``--train`` of the 1,347 training images (fixed subset per
seed), for ``--epochs`` epochs (Adam, batch 32), through ``SingleTeacherDistill`` (``OverhaulFeatureDistillation``
for OFD) built from a distiller dict written as MMRazor's config of that loss writes it -- the losses, weights,
temperatures and connectors of the shipped config, with the recorders pointed at the digits models' layers.
Every row adds the task loss (cross-entropy), as the configs do. Test accuracy on the 450 held-out images: mean
and standard deviation over seeds, the paired difference to the student trained alone (same seed: same start,
subset and batches) and on how many seeds the family beat it; seconds per training run (median).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from slimkit import zoo
from slimkit.razor import batch_loss, build
from slimkit.training import fit
from slimkit.zoo.digits_cnn import accuracy, digits_split

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line, print_table  # noqa: E402


class SmallCNN(nn.Module):
    """DigitsCNN's layout (same module paths) at ``widths``: the student."""

    def __init__(self, widths: tuple[int, int, int] = (4, 8, 16), hidden: int = 32) -> None:
        super().__init__()
        a, b, c = widths
        self.features = nn.Sequential(
            nn.Conv2d(1, a, 3, padding=1, bias=False), nn.BatchNorm2d(a), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(a, b, 3, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(b, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU())
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(c * 4, hidden), nn.ReLU(), nn.Linear(hidden, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def rec(**sources: str) -> dict[str, dict[str, str]]:
    return {name: dict(type="ModuleOutputs", source=src) for name, src in sources.items()}


def pair(s_rec: str, t_rec: str, s_arg: str = "preds_S", t_arg: str = "preds_T", s: dict | None = None,
         t: dict | None = None) -> dict[str, Any]:
    return {s_arg: dict(from_student=True, recorder=s_rec, **(s or {})),
            t_arg: dict(from_student=False, recorder=t_rec, **(t or {}))}


LOGITS = rec(fc="classifier.3")
LABELS = dict(gt_labels=dict(type="ModuleInputs", source="head.loss_module"))
LABEL_ARG = dict(gt_labels=dict(from_student=True, recorder="gt_labels", data_idx=1))


def conv(cin: int, cout: int, act: bool = True) -> dict[str, Any]:
    return dict(type="ConvModuleConnector", in_channel=cin, out_channel=cout, norm_cfg=dict(type="BN"),
                **({} if act else {"act_cfg": None}))


#: name -> (distiller config as MMRazor's config of that loss writes it, algorithm type, what the config is)
FAMILIES: dict[str, tuple[dict[str, Any], str, str]] = {
    "KD": (dict(student_recorders=LOGITS, teacher_recorders=LOGITS,
                distill_losses=dict(loss_kl=dict(type="KLDivergence", tau=1, loss_weight=3)),
                loss_forward_mappings=dict(loss_kl=pair("fc", "fc"))), "SingleTeacherDistill", "kd"),
    "DKD": (dict(student_recorders={**LOGITS, **LABELS}, teacher_recorders=LOGITS,
                 distill_losses=dict(loss_dkd=dict(type="DKDLoss", tau=1, beta=0.5, reduction="mean")),
                 loss_forward_mappings=dict(loss_dkd={**pair("fc", "fc"), **LABEL_ARG})),
            "SingleTeacherDistill", "dkd"),
    "DIST": (dict(student_recorders=LOGITS, teacher_recorders=LOGITS,
                  distill_losses=dict(loss_kl=dict(type="DISTLoss", tau=1, loss_weight=2)),
                  loss_forward_mappings=dict(loss_kl=pair("fc", "fc", "logits_S", "logits_T"))),
             "SingleTeacherDistill", "dist"),
    "WSLD": (dict(student_recorders={**LOGITS, **LABELS}, teacher_recorders=LOGITS,
                  distill_losses=dict(loss_wsld=dict(type="WSLD", tau=2, loss_weight=2.5)),
                  loss_forward_mappings=dict(loss_wsld={**pair("fc", "fc", "student", "teacher"), **LABEL_ARG})),
             "SingleTeacherDistill", "wsld"),
    "RKD": (dict(student_recorders=rec(feat="classifier.2"), teacher_recorders=rec(feat="classifier.2"),
                 distill_losses=dict(loss_dw=dict(type="DistanceWiseRKD", loss_weight=25),
                                     loss_aw=dict(type="AngleWiseRKD", loss_weight=50)),
                 loss_forward_mappings=dict(loss_dw=pair("feat", "feat"), loss_aw=pair("feat", "feat"))),
            "SingleTeacherDistill", "rkd"),
    "FitNets": (dict(student_recorders={**rec(s2="features.6", s3="features.10"), **LOGITS},
                     teacher_recorders={**rec(s2="features.6", s3="features.10"), **LOGITS},
                     distill_losses=dict(loss_s2=dict(type="L2Loss", loss_weight=10),
                                         loss_s3=dict(type="L2Loss", loss_weight=10),
                                         loss_kl=dict(type="KLDivergence", tau=6, loss_weight=10, reduction="mean")),
                     connectors=dict(c2=conv(8, 64), c3=conv(16, 128)),
                     loss_forward_mappings=dict(
                         loss_s2=pair("s2", "s2", "s_feature", "t_feature", s=dict(connector="c2")),
                         loss_s3=pair("s3", "s3", "s_feature", "t_feature", s=dict(connector="c3")),
                         loss_kl=pair("fc", "fc"))), "SingleTeacherDistill", "fitnets"),
    "AT": (dict(student_recorders=rec(s2="features.6", s3="features.10"),
                teacher_recorders=rec(s2="features.6", s3="features.10"),
                distill_losses=dict(loss_s2=dict(type="ATLoss", loss_weight=250.0),
                                    loss_s3=dict(type="ATLoss", loss_weight=250.0)),
                loss_forward_mappings=dict(loss_s2=pair("s2", "s2", "s_feature", "t_feature"),
                                           loss_s3=pair("s3", "s3", "s_feature", "t_feature"))),
           "SingleTeacherDistill", "zskt's AT terms"),
    "OFD": (dict(type="OFDDistiller", student_recorders=rec(b2="features.5", b3="features.9"),
                 teacher_recorders=rec(b2="features.5", b3="features.9"),
                 distill_losses=dict(loss_2=dict(type="OFDLoss", loss_weight=0.5),
                                     loss_3=dict(type="OFDLoss", loss_weight=1.0)),
                 connectors=dict(s2=conv(8, 64, act=False), t2=dict(type="OFDTeacherConnector"),
                                 s3=conv(16, 128, act=False), t3=dict(type="OFDTeacherConnector")),
                 loss_forward_mappings=dict(
                     loss_2=pair("b2", "b2", "s_feature", "t_feature", s=dict(connector="s2"), t=dict(connector="t2")),
                     loss_3=pair("b3", "b3", "s_feature", "t_feature", s=dict(connector="s3"),
                                 t=dict(connector="t3")))), "OverhaulFeatureDistillation", "ofd"),
    "CWD": (dict(student_recorders=rec(s3="features.10"), teacher_recorders=rec(s3="features.10"),
                 distill_losses=dict(loss_cwd=dict(type="ChannelWiseDivergence", tau=1, loss_weight=5)),
                 connectors=dict(c3=conv(16, 128, act=False)),
                 loss_forward_mappings=dict(loss_cwd=pair("s3", "s3", s=dict(connector="c3")))),
            "SingleTeacherDistill", "cwd (seg)"),
    "PKD": (dict(student_recorders=rec(s3="features.10"), teacher_recorders=rec(s3="features.10"),
                 distill_losses=dict(loss_pkd=dict(type="PKDLoss", loss_weight=6)),
                 connectors=dict(c3=conv(16, 128, act=False)),
                 loss_forward_mappings=dict(loss_pkd=pair("s3", "s3", s=dict(connector="c3")))),
            "SingleTeacherDistill", "pkd (det)"),
    "MGD": (dict(student_recorders=rec(s3="features.10"), teacher_recorders=rec(s3="features.10"),
                 distill_losses=dict(loss_mgd=dict(type="MGDLoss", alpha_mgd=0.00002)),
                 connectors=dict(c3=dict(type="MGDConnector", student_channels=16, teacher_channels=128,
                                         lambda_mgd=0.65)),
                 loss_forward_mappings=dict(loss_mgd=pair("s3", "s3", s=dict(connector="c3")))),
            "SingleTeacherDistill", "mgd (det)"),
    "CRD": (dict(student_recorders={**rec(feat="classifier.2"), "data_samples": dict(type="ModuleInputs", source="")},
                 teacher_recorders=rec(feat="classifier.2"),
                 distill_losses=dict(loss_crd=dict(type="CRDLoss", loss_weight=0.8, neg_num=1024, sample_n=1347)),
                 connectors=dict(stu=dict(type="CRDConnector", dim_in=32, dim_out=128),
                                 tea=dict(type="CRDConnector", dim_in=128, dim_out=128)),
                 loss_forward_mappings=dict(loss_crd=dict(
                     s_feats=dict(from_student=True, recorder="feat", connector="stu"),
                     t_feats=dict(from_student=False, recorder="feat", connector="tea"),
                     data_samples=dict(from_student=True, recorder="data_samples", data_idx=1)))),
            "SingleTeacherDistill", "crd"),
}


def run(name: str, teacher: nn.Module, data: list, seed: int, args: argparse.Namespace) -> tuple[float, float]:
    torch.manual_seed(seed)
    student = SmallCNN()
    if name == "alone":
        model, loss = student, None
    else:
        distiller, kind, _ = FAMILIES[name]
        model = build(dict(type=kind, architecture=student, teacher=teacher, distiller=distiller))
        loss = batch_loss
    start = time.perf_counter()
    fit(model, data, loss=loss, lr=args.lr, epochs=1, seed=seed, progress=False)
    seconds = time.perf_counter() - start
    _, _, x_test, y_test = digits_split()
    return accuracy(student, x_test, y_test), seconds


def batches(x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor, seed: int, epochs: int, indexed: bool) -> list:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(epochs):
        order = idx[torch.randperm(len(idx), generator=g)]
        for i in range(0, len(order), 32):
            b = order[i:i + 32]
            out.append((x[b], {"labels": y[b], "sample_idx": b} if indexed else y[b]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--train", type=float, default=0.25, help="share of the training images the student sees")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", nargs="*", default=None, help="loss families to run (default: all)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    teacher = zoo.load("digits_cnn").model.eval()
    x, y, x_test, y_test = digits_split()
    print(machine_line(args.threads))
    print(f"teacher digits_cnn: test acc {accuracy(teacher, x_test, y_test):.3f}, "
          f"{sum(p.numel() for p in teacher.parameters()) / 1e3:.1f}k params; student "
          f"{sum(p.numel() for p in SmallCNN().parameters()) / 1e3:.1f}k params")
    names = ["alone", *(args.only or FAMILIES)]
    results: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for seed in args.seeds:
        idx = torch.randperm(len(x), generator=torch.Generator().manual_seed(100 + seed))[:int(args.train * len(x))]
        plain, indexed = (batches(x, y, idx, seed, args.epochs, flag) for flag in (False, True))
        for name in names:
            results[name].append(run(name, teacher, indexed if name == "CRD" else plain, seed, args))
            print(f"seed {seed} {name}: {results[name][-1][0]:.3f} ({results[name][-1][1]:.1f} s)", flush=True)
    alone = [a for a, _ in results["alone"]]
    rows = []
    for name in names:
        accs = [a for a, _ in results[name]]
        better = sum(a > b for a, b in zip(accs, alone, strict=True))
        rows.append([name, FAMILIES[name][2] if name in FAMILIES else "task loss only", f"{statistics.mean(accs):.3f}",
                     f"{statistics.pstdev(accs):.3f}",
                     "" if name == "alone" else f"{100 * (statistics.mean(accs) - statistics.mean(alone)):+.1f}",
                     "" if name == "alone" else f"{better}/{len(accs)}",
                     f"{statistics.median(s for _, s in results[name]):.1f}"])
    print_table(["loss family", "MMRazor config", "test acc (mean)", "std", "vs alone (points)", "seeds better",
                 "train s"], rows)


if __name__ == "__main__":
    main()
