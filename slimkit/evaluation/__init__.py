"""Honest measurement of models and their smashed versions: size, parameters, MACs, latency, memory, quality.

``compare(base, smashed, inputs)`` prints a table and says plainly when a smashed model is NOT FASTER or
NOT SMALLER. ``plot_comparison`` (needs matplotlib) draws comparisons as a PNG bar chart.
"""

from slimkit.evaluation.counting import count_macs, count_macs_by_dtype, count_parameters
from slimkit.evaluation.plots import plot_comparison
from slimkit.evaluation.quality import Fidelity, accuracy, fidelity, perplexity
from slimkit.evaluation.report import Comparison, MetricRow, compare
from slimkit.evaluation.runtime import (
    Latency,
    measure_latency,
    measure_latency_pair,
    peak_bytes,
    peak_memory,
    set_threads,
)
from slimkit.evaluation.size import size_on_disk
from slimkit.evaluation.topk import Accuracy
from slimkit.evaluation.training_memory import training_peak_memory

__all__ = [
    "Accuracy",
    "Comparison",
    "Fidelity",
    "Latency",
    "MetricRow",
    "accuracy",
    "compare",
    "count_macs",
    "count_macs_by_dtype",
    "count_parameters",
    "fidelity",
    "measure_latency",
    "measure_latency_pair",
    "peak_bytes",
    "peak_memory",
    "perplexity",
    "plot_comparison",
    "set_threads",
    "size_on_disk",
    "training_peak_memory",
]
