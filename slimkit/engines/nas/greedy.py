"""Greedy channel slimming (AutoSlim, Yu & Huang 2019): narrow a trained width supernet one step at a time.

From the widest subnet, each round tries every width mutable one choice narrower, scores each try on the
supernet (``score_fn`` or MMRazor's ``dataloader`` + ``evaluator``, after the optional batch-norm calibration)
and keeps the one that loses least; rounds repeat until the FLOPs are at or under the target. Targets are
visited from the largest down, each continuing from the previous one's subnet, so one pass gives a subnet per
target (MMRazor's ``AutoSlimGreedySearchLoop``: ``target_flops=(500., 300., 200.)`` in millions of MACs with
``units="mmrazor"``, the default). Only :class:`~slimkit.engines.nas.MutableChannels` are narrowed; other
mutables keep their current choice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from slimkit.core.registry import build_module, register_component
from slimkit.engines.nas.constraints import UNITS, check_units, in_units, measure_subnet
from slimkit.engines.nas.mutables import MutableChannels
from slimkit.engines.nas.mutator import NasMutator, Subnet, unwrap
from slimkit.engines.nas.search_inputs import calibration, evaluator_score, example_from, score_subnet
from slimkit.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass
class GreedySubnet:
    """One target's result: the subnet ``{name: {"chosen": width}}``, its FLOPs (slimkit units) and score."""

    target: float
    subnet: dict[str, dict[str, Any]]
    flops: float
    score: float
    history: list[dict[str, Any]] = field(default_factory=list)


class GreedyChannelSearch:
    """Greedy slimming of ``model`` (an algorithm with ``.mutator`` or a supernet) to each of ``target_flops``.

    ``score_fn(model)`` -> a number or a dict (``score_key`` picks one; higher is better), or ``dataloader`` +
    ``evaluator`` (as :class:`~slimkit.engines.nas.EvolutionSearchLoop`). ``example_inputs`` (default: zeros of
    ``estimator_cfg['input_shape']``, else the dataloader's first sample) is what FLOPs are counted on.
    """

    def __init__(self, model: nn.Module, target_flops: Sequence[float] | float,
                 score_fn: Callable[..., Any] | None = None, example_inputs: Any = None, dataloader: Any = None,
                 evaluator: Any = None, score_key: str | None = None,
                 calibrate_fn: Callable[[nn.Module], Any] | None = None, calibrate_sample_num: int = -1,
                 calibrate_dataloader: Any = None, estimator_cfg: Mapping[str, Any] | None = None,
                 units: str = "mmrazor", progress: bool = True) -> None:
        self.model = build_module(model, "model")
        if (score_fn is None) == (evaluator is None) or (evaluator is not None and dataloader is None):
            raise ConfigError("GreedyChannelSearch scores candidates with score_fn= (model -> number or dict) or with "
                              "dataloader= and evaluator= (e.g. dict(type='Accuracy', topk=(1, 5))): give one.")
        if score_fn is None:
            score_fn, score_key = evaluator_score(dataloader, evaluator), score_key or "accuracy/top1"
        self.score_fn, self.score_key = score_fn, score_key or "accuracy"
        self.example_inputs = example_inputs if example_inputs is not None else example_from(dataloader, estimator_cfg)
        if self.example_inputs is None:
            raise ConfigError("GreedyChannelSearch counts FLOPs on example_inputs (one batch) or "
                              "estimator_cfg=dict(input_shape=(1, C, H, W)); give one.")
        self.calibrate_fn = calibrate_fn or calibration(calibrate_sample_num, calibrate_dataloader or dataloader)
        self.units = check_units(units)
        targets = [target_flops] if isinstance(target_flops, (int, float)) else list(target_flops or [])
        if not targets or any(isinstance(t, bool) or not isinstance(t, (int, float)) or t <= 0 for t in targets):
            raise ConfigError(f"target_flops must be positive numbers (in {self.units} units), got {target_flops!r}.")
        self.targets = sorted((float(t) * UNITS[self.units]["flops"] for t in targets), reverse=True)
        self.supernet = unwrap(self.model)
        self.mutator: NasMutator = getattr(self.model, "mutator", None) or NasMutator(self.supernet)
        self.widths = [n for n, m in self.mutator.mutables.items() if isinstance(m, MutableChannels)]
        if not self.widths:
            raise ConfigError("GreedyChannelSearch narrows widths, and this supernet has no MutableChannels; use "
                              "EvolutionSearchLoop for other mutables.")
        self.progress = progress

    def flops(self, subnet: Subnet) -> float:
        """FLOPs of ``subnet`` (2 x MACs on the example inputs)."""
        return measure_subnet(self.supernet, subnet, ["flops"], self.example_inputs)["flops"]

    def score(self, subnet: Subnet) -> float:
        """``score_fn`` of ``subnet`` on the supernet, after calibration."""
        metrics = score_subnet(self.model, self.mutator, subnet, self.score_fn, self.calibrate_fn, self.score_key)
        return float(metrics[self.score_key])

    def narrower(self, subnet: Subnet) -> dict[str, Subnet]:
        """Each width one choice narrower (those already at their narrowest are left out)."""
        out = {}
        for name in self.widths:
            choices = self.mutator.mutables[name].choices
            index = choices.index(subnet[name])
            if index > 0:
                out[name] = {**subnet, name: choices[index - 1]}
        return out

    def run(self) -> list[GreedySubnet]:
        """One :class:`GreedySubnet` per target, largest target first; the last one is left active."""
        current = {**self.mutator.current_choices(), **{n: self.mutator.max_choices()[n] for n in self.widths}}
        flops, results = self.flops(current), []
        score = self.score(current)
        for target in self.targets:
            history = []
            while flops > target:
                tries = self.narrower(current)
                if not tries:
                    raise ConfigError(f"target_flops {in_units('flops', target, self.units)} is below the narrowest "
                                      f"subnet ({in_units('flops', flops, self.units)}).")
                scored = sorted(((self.score(s), name, s) for name, s in tries.items()), key=lambda t: (-t[0], t[1]))
                score, name, current = scored[0]
                flops = self.flops(current)
                history.append({"narrowed": name, "width": current[name], "score": score, "flops": flops})
                if self.progress:
                    log.info("greedy slimming: %s -> %d channels, score %.4g, %s", name, current[name], score,
                             in_units("flops", flops, self.units))
            results.append(GreedySubnet(target, self.mutator.fix_subnet(current), flops, score, history))
        self.mutator.set_choices(current)
        return results


register_component(GreedyChannelSearch, "loop", "AutoSlimGreedySearchLoop")
