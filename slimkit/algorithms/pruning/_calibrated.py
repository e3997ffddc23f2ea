"""What the calibrated LLM pruners (sparsegpt, wanda) share: the pattern knobs, the model check, the record.

Both run calibration text through a language model block by block (the GPTQ path), zero weights in place
(exact zeros, saved as ordinary weights) and record each layer's achieved sparsity and the coverage: which
Linear-like layers were left dense and why (``lm_head`` by default, layers outside the transformer blocks).
"""

from __future__ import annotations

from typing import Any, ClassVar

from slimkit.algorithms.quantization import _lowbit_support as support
from slimkit.algorithms.quantization._targets import TargetsMixin, model_targets, record_coverage
from slimkit.core.contract import SaveFn, SlimkitPruner, SmashConfigPrefixWrapper
from slimkit.core.hyperparameters import Hyperparameter, ListHyperparameter, choice, real
from slimkit.core.weights import DENSE, Target, select
from slimkit.engines.pruning.sparsegpt import PruningStep, run_pruner
from slimkit.engines.quantization.lowbit.quantize import LayerStatsCollector
from slimkit.errors import ConfigError

#: llm-compressor's ``mask_structure`` spellings: "0:0" unstructured, else N:M with N zeros in every M columns
MASK_STRUCTURES = ("0:0", "2:4", "4:8")
OUTSIDE_REASON = "outside the transformer blocks (no calibrated inputs there): left dense"
SPARSITY_KEY = "sparsity"


def parse_mask_structure(structure: str, sparsity: float) -> tuple[int, int]:
    """``(N, M)`` of an ``"N:M"`` mask structure (``(0, 0)``: unstructured); a ConfigError for a contradiction."""
    n, m = (int(part) for part in str(structure).split(":"))
    if m and abs(sparsity - n / m) > 1e-9:
        raise ConfigError(f"mask_structure={structure!r} removes {n} of every {m} weights (sparsity {n / m:g}), but "
                          f"sparsity={sparsity:g} was asked; set sparsity={n / m:g} or mask_structure='0:0'.")
    return n, m


class CalibratedLLMPruner(TargetsMixin, SlimkitPruner):
    """Base of the LLM pruners calibrated block by block on text (needs a tokenizer and data)."""

    tokenizer_required = True
    dataset_required = True
    save_fn = SaveFn.REPLAY  # packed layers (sparse + low-bit) are rebuilt on load; pruned weights load as they are
    supported_models: ClassVar[str] = ("It needs a language model taking input_ids with a list of transformer "
                                       "blocks holding nn.Linear (or subclasses) or GPT-2 Conv1D layers.")

    def model_check_fn(self, model: Any) -> bool:
        """Needs a token-id language model with transformer blocks holding Linear layers."""
        return super().model_check_fn(model) and support.is_block_language_model(model)

    @staticmethod
    def pattern_hyperparameters() -> list[Hyperparameter]:
        """``sparsity``, ``mask_structure`` and ``exclude``."""
        return [
            real("sparsity", 0.0, 0.99, 0.5, "Share of each layer's weights set to zero (with an N:M mask_structure it "
                 "must be N/M)."),
            choice("mask_structure", list(MASK_STRUCTURES), "0:0", "'0:0': unstructured; 'N:M': N zeros in every group "
                   "of M consecutive input weights of a row (2:4 runs on sparse tensor cores)."),
            ListHyperparameter("exclude", support.DEFAULT_EXCLUDE,
                               meta={"desc": "Layers left dense: exact names or glob patterns (a pattern also "
                                             "matches the last name part); lm_head by default."}),
        ]

    def worker(self, smash_config: SmashConfigPrefixWrapper, prune_n: int, prune_m: int) -> LayerStatsCollector:
        """The engine's block-wise worker for these hyperparameters (N:M already parsed)."""
        raise NotImplementedError

    def _worker(self, smash_config: SmashConfigPrefixWrapper) -> LayerStatsCollector:
        sparsity = float(smash_config["sparsity"])
        return self.worker(smash_config, *parse_mask_structure(smash_config["mask_structure"], sparsity))

    def _apply(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> Any:
        worker = self._worker(smash_config)
        targets = model_targets(model)
        ids = support.read_calibration_ids(model, smash_config)
        records, _ = run_pruner(model, ids, worker, tuple(smash_config["exclude"]), 1, self.algorithm_name)
        self._record(smash_config, records, targets)
        return model

    def stream_step(self, model: Any, smash_config: SmashConfigPrefixWrapper) -> PruningStep:
        """The same worker on each block's calibration inputs, for a model streamed block by block."""
        return PruningStep(self._worker(smash_config), support.read_calibration_ids(model, smash_config),
                           self.algorithm_name, tuple(smash_config["exclude"]))

    def stream_finish(self, smash_config: SmashConfigPrefixWrapper, summary: dict[str, Any]) -> None:
        """Record the per-layer sparsity, packed specs and coverage of a streaming run, as ``_apply`` does."""
        self._record(smash_config, summary["specs"], summary["targets"])

    @staticmethod
    def _record(smash_config: SmashConfigPrefixWrapper, records: dict[str, dict], targets: list[Target]) -> None:
        """State: ``sparsity`` per pruned layer, ``layers`` (packed specs, sparse + low-bit), ``coverage``."""
        exclude = tuple(smash_config["exclude"])
        outside = {t.name: OUTSIDE_REASON for t in select(targets, DENSE, exclude) if t.name not in records}
        state = smash_config.state
        state[SPARSITY_KEY] = {n: round(r["sparsity"], 6) for n, r in records.items()}
        state[support.STATE_KEY] = {n: r["packed"] for n, r in records.items() if "packed" in r}
        record_coverage(state, targets, records, exclude, support.DEFAULT_EXCLUDE, outside)

    def replay(self, model: Any, smash_config: SmashConfigPrefixWrapper, state: dict[str, Any]) -> Any:
        """Swap the packed layers (sparse + low-bit) for empty ones; pruned dense weights need nothing."""
        return support.replay(model, state)
