import sys

import matplotlib  # noqa: E402,F401  (installed by `make`; a missing package must fail, not skip)
import pytest

from slimkit.errors import ConfigError, MissingPackageError
from slimkit.evaluation import Comparison, MetricRow, plot_comparison


def comparison(speed: float, size: float, cosine: float) -> Comparison:
    return Comparison(
        rows=[
            MetricRow("latency_ms", "latency", 10.0, 10.0 / speed, "lower"),
            MetricRow("size_bytes", "size", 1000, 1000 / size, "lower"),
            MetricRow("cosine_mean", "cosine", 1.0, cosine, "higher", has_ratio=False),
        ],
        verdicts=[],
    )


def test_plot_writes_a_png_atomically(tmp_path):
    out = plot_comparison(
        {"int8": comparison(1.4, 3.9, 0.98), "same": comparison(1.0, 1.0, 1.0)}, tmp_path / "sub" / "chart.png"
    )
    assert out == tmp_path / "sub" / "chart.png"
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert [p.name for p in out.parent.iterdir()] == ["chart.png"]  # no temp file left behind


def test_plot_tolerates_missing_rows(tmp_path):
    partial = Comparison(rows=[MetricRow("latency_ms", "latency", 2.0, 1.0, "lower")], verdicts=[])
    assert plot_comparison({"partial": partial}, tmp_path / "p.png").stat().st_size > 0


def test_plot_rejects_bad_arguments(tmp_path):
    with pytest.raises(ConfigError, match="needs a non-empty dict"):
        plot_comparison({}, tmp_path / "x.png")
    with pytest.raises(ConfigError, match="must be a Comparison"):
        plot_comparison({"a": 1.5}, tmp_path / "x.png")
    with pytest.raises(ConfigError, match="Use a path ending in '.png'"):
        plot_comparison({"a": comparison(1, 1, 1)}, tmp_path / "x.jpg")


def test_missing_matplotlib_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingPackageError, match=r"pip install 'slimkit\[eval\]'"):
        plot_comparison({"a": comparison(1, 1, 1)}, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
