"""What a script-free experiment measures, on held-out data, with slimkit's own evaluation.

* ``accuracy``: the digits CNN on the zoo's held-out test split (450 images);
* ``perplexity``: language models on held-out PyDocText (test documents, never used for calibration);
* ``cosine``: any model, mean cosine of its main output to the base model's on the example inputs;
* ``latency`` (median ms of one forward on the example inputs), ``size`` (bytes on disk),
  ``params`` and ``macs``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from slimkit.errors import ConfigError
from slimkit.evaluation import count_macs, count_parameters, fidelity, measure_latency, perplexity, size_on_disk
from slimkit.utils import main_tensor, run_model


def _threads(n_parallel: int) -> int:
    return max(1, (os.cpu_count() or 1) // max(1, n_parallel))


class Bench:
    """The base model and its held-out data, loaded once per worker; :meth:`measure` judges one model."""

    def __init__(self, source: str, objectives: dict[str, str], n_parallel: int = 1,
                 runtime_args: dict[str, Any] | None = None) -> None:
        """Load ``source`` (anything ``load_source`` takes) and check that each objective can be measured on it."""
        from slimkit.zoo.sources import load_source

        args = runtime_args or {}
        self.threads = int(args.get("threads", _threads(n_parallel)))
        self.repeats = int(args.get("repeats", 10))
        self.warmup = int(args.get("warmup", 2))
        self.loaded = load_source(source)
        self.base = self.loaded.model.eval()
        self.inputs = self.loaded.example_inputs
        if self.inputs is None:
            raise ConfigError(f"model: {source!r} came without example inputs, which measuring needs; return "
                              "(module, example_inputs) from the factory.")
        is_lm = self.loaded.task == "causal_lm" and self.loaded.tokenizer is not None
        if "accuracy" in objectives and self.loaded.name != "digits_cnn":
            raise ConfigError(f"objectives.accuracy: slimkit measures held-out accuracy for digits_cnn (its test "
                              f"split); for {source!r} use {'perplexity' if is_lm else 'cosine'} instead.")
        if "perplexity" in objectives and not is_lm:
            raise ConfigError(f"objectives.perplexity: needs a causal language model with a tokenizer; {source!r} is "
                              f"not one (task {self.loaded.task or 'unknown'!r}); use cosine or accuracy.")
        self._held_out: Any = None

    def _accuracy(self, model: Any) -> float:
        from slimkit.zoo import digits_split

        if self._held_out is None:
            self._held_out = digits_split()[2:]
        x, y = self._held_out
        with torch.inference_mode():
            predicted = main_tensor(run_model(model, x)).argmax(-1)
        return float((predicted == y).float().mean())

    def _perplexity(self, model: Any) -> float:
        from slimkit.data import pydoc_text_blocks

        config = getattr(self.base, "config", None)
        limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or 128
        if self._held_out is None:
            self._held_out = pydoc_text_blocks(self.loaded.tokenizer, 4, min(128, int(limit)), split="test")
        return perplexity(model, self._held_out)

    def measure(self, model: Any, objectives: dict[str, str] | list[str]) -> dict[str, float]:
        """Every objective of ``model`` (plus latency, size and params, always recorded)."""
        names = list(dict.fromkeys([*objectives, "latency", "size", "params"]))
        measures: dict[str, Callable[[Any], float]] = {
            "accuracy": self._accuracy, "perplexity": self._perplexity,
            "cosine": lambda m: fidelity(self.base, m, self.inputs).cosine_mean,
            "latency": lambda m: measure_latency(m, self.inputs, warmup=self.warmup, repeats=self.repeats,
                                                 threads=self.threads).median_ms,
            "size": lambda m: float(size_on_disk(m)), "params": lambda m: float(count_parameters(m)),
            "macs": lambda m: float(count_macs(m, self.inputs))}
        return {name: measures[name](model) for name in names if name in measures}
