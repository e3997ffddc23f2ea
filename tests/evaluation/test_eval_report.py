import json
import sys
import time

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import slimkit.evaluation.report as report
from slimkit.core.coverage import coverage
from slimkit.core.weights import find_targets
from slimkit.engines.quantization.int8 import quantize_layers
from slimkit.errors import ConfigError
from slimkit.evaluation import Comparison, compare

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*torch.ao.quantization is deprecated"),
    pytest.mark.filterwarnings("ignore:.*quantized tensor creation functions"),
]

FAST = {"warmup": 1, "repeats": 4, "threads": 1}


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))


class Sleeper(nn.Module):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 4)
        self.seconds = seconds

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return self.fc(x)


class SleepyMLP(nn.Sequential):
    """An MLP whose forward also sleeps 20 ms, so that CPU noise from other processes cannot fake a speedup."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.02)
        return super().forward(x)


def test_comparing_a_model_with_itself_says_not_faster_and_not_smaller():
    model = SleepyMLP(*mlp())
    comp = compare(model, model, torch.randn(8, 32), **FAST)
    text = str(comp)
    for label in (
        "size on disk (bytes)",
        "parameters",
        "MACs per forward",
        "latency median (ms) @ 1 threads",
        "throughput (items/s)",
        "fidelity cosine mean",
        "fidelity cosine min",
        "fidelity max abs diff",
    ):
        assert label in comp.table()
    assert "NOT FASTER" in text and "threshold 1.05x" in text and "at 1 threads" in text
    assert "NOT SMALLER: 1.00x size ratio on disk" in text
    assert comp.row("parameters").base == comp.row("parameters").smashed == 32 * 64 + 64 + 64 * 4 + 4
    assert comp.row("macs").smashed == 8 * (32 * 64 + 64 * 4)
    assert comp.row("size_bytes").ratio == 1.0
    assert comp.row("cosine_mean").smashed == pytest.approx(1.0, abs=1e-12)
    assert comp.row("max_abs").smashed == 0.0 and comp.row("max_abs").ratio is None
    assert json.loads(json.dumps(comp.to_dict()))["verdicts"] == comp.verdicts


def test_quantized_model_is_reported_smaller_with_same_parameters():
    base = mlp()
    q = torch.ao.quantization.quantize_dynamic(mlp(), {nn.Linear}, dtype=torch.qint8)
    comp = compare(base, q, torch.randn(8, 32), **FAST)
    assert comp.row("size_bytes").ratio > 2.0  # int8 weights; headers weigh on a tiny model
    assert any(v.startswith(f"{comp.row('size_bytes').ratio:.2f}x smaller on disk") for v in comp.verdicts)
    assert not any(v.startswith("NOT SMALLER") for v in comp.verdicts)
    assert comp.row("parameters").ratio == 1.0 and comp.row("macs").ratio == 1.0
    assert 0.99 < comp.row("cosine_mean").smashed < 1.0


def test_faster_model_gets_a_positive_speed_verdict():
    comp = compare(Sleeper(0.02), Sleeper(0.004), torch.randn(2, 32), warmup=1, repeats=3, threads=1)
    speedup = comp.row("latency_ms").ratio
    assert speedup > 2.0
    assert comp.verdicts[0] == next(v for v in comp.verdicts if v.endswith("ms)"))
    assert comp.verdicts[0].startswith(f"{speedup:.2f}x faster at 1 threads")
    assert comp.row("throughput").ratio == pytest.approx(speedup)
    slower = compare(Sleeper(0.004), Sleeper(0.02), torch.randn(2, 32), warmup=1, repeats=3, threads=1)
    assert slower.verdicts[0].startswith("NOT FASTER") and "x slower" in slower.verdicts[0]


def test_accuracy_and_extra_rows():
    x = torch.randn(20, 32)
    y = mlp()(x).argmax(-1)
    y[:5] = (y[:5] + 1) % 4
    data = DataLoader(TensorDataset(x, y), batch_size=8)
    comp = compare(
        mlp(), mlp(), x[:4], data=data, extra={"recall@10": (0.9, 0.8, "higher"), "loss": (2.0, 1.0)}, **FAST
    )
    assert comp.row("accuracy").base == comp.row("accuracy").smashed == pytest.approx(0.75)
    assert "accuracy 0.7500 -> 0.7500 (+0.00 points)" in comp.verdicts
    assert comp.row("recall@10").ratio == pytest.approx(0.8 / 0.9)
    assert comp.row("loss").better is None and comp.row("loss").ratio == 0.5
    assert "recall@10" in comp.table()


def test_bad_extra_is_refused_before_measuring():
    with pytest.raises(ConfigError, match=r"extra\['x'\] must be \(base, smashed\)"):
        compare(mlp(), mlp(), torch.randn(1, 32), extra={"x": 3})
    with pytest.raises(ConfigError, match="'higher'|'lower'"):
        compare(mlp(), mlp(), torch.randn(1, 32), extra={"x": (1, 2, "up")})


def test_uncountable_macs_show_na_instead_of_crashing(monkeypatch):
    def broken(model, inputs):
        raise RuntimeError("unsupported op")

    monkeypatch.setattr(report, "count_macs_by_dtype", broken)
    comp = compare(mlp(), mlp(), torch.randn(2, 32), **FAST)
    row = comp.row("macs")
    assert row.base is None and row.ratio is None
    line = next(line for line in comp.table().splitlines() if line.startswith("MACs"))
    assert line.split()[-4:] == ["n/a", "n/a", "n/a", "lower"]
    assert "MACs of base: n/a (RuntimeError: unsupported op)" in comp.verdicts
    assert "MACs of smashed: n/a (RuntimeError: unsupported op)" in comp.verdicts


def test_broken_smashed_model_is_reported_not_crashed():
    comp = compare(mlp(), nn.Sequential(nn.Linear(32, 3)), torch.randn(2, 32), **FAST)
    assert comp.row("cosine_mean").smashed is None
    expected = "fidelity: n/a (DataError: fidelity needs outputs of the same shape"
    assert any(v.startswith(expected) for v in comp.verdicts)


def test_print_plain_without_rich_and_rich_with_it(monkeypatch, capsys):
    comp = Comparison(
        rows=[report.MetricRow("parameters", "parameters", 100, 50, "lower")], verdicts=["NOT FASTER: test"]
    )
    assert comp.row("parameters").ratio == 2.0
    with pytest.raises(KeyError, match="available: \\['parameters'\\]"):
        comp.row("nope")
    comp.print()
    out = capsys.readouterr().out
    assert "parameters" in out and "2x" in out and "NOT FASTER: test" in out
    monkeypatch.setitem(sys.modules, "rich.console", None)
    comp.print()
    assert capsys.readouterr().out.strip() == str(comp).strip()


def test_macs_split_by_dtype_and_coverage_verdicts():
    base = mlp()
    targets = find_targets(base)
    smashed = quantize_layers(mlp(), ["0"], reduce_range=False)
    record = coverage(targets, ["0"])
    comp = compare(base, smashed, torch.randn(2, 32), coverage={"int8_smooth": record}, **FAST)
    assert comp.row("macs").ratio == 1.0  # int8 MACs are MACs
    assert comp.row("macs_int8").smashed == 2 * 32 * 64 and comp.row("macs_fp32").base == 2 * (32 * 64 + 64 * 4)
    assert comp.row("quantized_share_int8_smooth").smashed == record["share"]
    assert any(v.startswith("NOT FULLY QUANTIZED: int8_smooth left 11.1% of the Linear-like") for v in comp.verdicts)
    assert any(v.startswith("int8_smooth: quantized 1 layers, 2.05k of 2.3k Linear-like parameters (88.9%")
               and "left 1 (256 params: 2): unsupported: Linear (linear) is not handled" in v for v in comp.verdicts)
    assert "MACs in int8" in comp.table()
