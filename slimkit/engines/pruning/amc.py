"""AMC (He et al., 2018): a DDPG agent picks each layer's kept-channel ratio under a FLOPs (MACs) budget.

An episode walks the selected layers in model order. At layer ``t`` the agent sees the layer's embedding
(index, output and input channels, kernel size, stride, its MACs, the MACs already removed, the MACs still to
come, the previous action; each feature scaled to [0, 1]) and outputs ``a`` in [0, 1], the preserve ratio
``lbound + a * (rbound - lbound)``. The ratio is capped so that the budget ``flops_ratio * MACs(model)``
stays reachable with every later layer at its minimum, and rounded down to a multiple of ``channel_round``
channels. At the end the masks (the base masker's lowest-ranked filters go) are scored by the evaluator
without training; the reward (``acc_reward``: the metric; ``acc_flops_reward``: ``-(1 - metric) *
log(MACs)``), minus a moving-average baseline, is given to every step of the episode. ``warmup`` episodes
explore at random, then the actor explores with truncated normal noise whose width decays by
``delta_decay`` per episode. The allocation with the best reward wins. MACs are counted by
:class:`~slimkit.engines.pruning.channel_macs.ChannelMacs` (what the speedup leaves).
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.data.batches import split_batch
from slimkit.engines.pruning.allocation import Allocation, AllocationPruner, check_evaluator
from slimkit.engines.pruning.channel_macs import ChannelMacs
from slimkit.engines.pruning.compressor import Pruner
from slimkit.engines.pruning.config import PruningConfigError
from slimkit.engines.pruning.ddpg import DDPGAgent
from slimkit.engines.pruning.training import check_fraction, check_positive_int
from slimkit.utils import model_device, move_inputs

REWARDS = ("acc_reward", "acc_flops_reward")
#: six static layer features, MACs removed so far, MACs still to come, the previous action
STATE_DIM = 9
_IGNORED = ("suffix", "model_type", "dataset", "n_calibration_batches", "n_points_per_layer", "window_length",
            "max_episode_length", "debug", "epsilon")


class AMCEngine(AllocationPruner):
    """AutoML for model compression: per-layer channel ratios from a DDPG agent under a MACs budget.

    ``AMCPruner(model, config_list, evaluator, val_loader=None, flops_ratio=0.5, lbound=0.2, rbound=1.0,
    reward="acc_reward", channel_round=8, hidden1=300, hidden2=300, lr_c=1e-3, lr_a=1e-4, warmup=100,
    discount=1.0, bsize=64, rmsize=100, tau=0.01, init_delta=0.5, delta_decay=0.99, train_episode=800,
    output_dir=None, seed=None, base_algo="l1", dummy_input=None)``. ``evaluator(val_loader, model)`` (NNI's
    form, when ``val_loader`` is given) or ``evaluator(model)`` scores an episode. ``config_list`` selects the
    layers (``sparsity`` there, when given, caps the layer's sparsity; AMC sets it); a selected layer whose
    channels the speedup cannot remove (the classifier, whose outputs are the model's) is left unpruned, with a
    warning. The NNI arguments ``suffix``, ``model_type``, ``dataset``, ``n_calibration_batches``,
    ``n_points_per_layer``, ``window_length``, ``max_episode_length``, ``debug`` and ``epsilon`` are accepted and
    have no effect here (the model is traced, and no channel reconstruction is done); passing one warns. After
    :meth:`compress`: ``allocation``, ``best_macs`` and ``history`` (one entry per episode).
    """

    user_name = "AMCPruner"  # NNI 1.x's name for it (slimkit.faces.nni.v1)

    def __init__(self, model: nn.Module, config_list: Sequence[Mapping[str, Any]],
                 evaluator: Callable[..., float] | None = None, val_loader: Iterable[Any] | None = None, *,
                 flops_ratio: float = 0.5, lbound: float = 0.2, rbound: float = 1.0, reward: str = "acc_reward",
                 channel_round: int = 8, hidden1: int = 300, hidden2: int = 300, lr_c: float = 1e-3,
                 lr_a: float = 1e-4, warmup: int = 100, discount: float = 1.0, bsize: int = 64, rmsize: int = 100,
                 tau: float = 0.01, init_delta: float = 0.5, delta_decay: float = 0.99, train_episode: int = 800,
                 output_dir: str | os.PathLike | None = None, seed: int | None = None, base_algo: str = "l1",
                 dummy_input: Any = None, optimizer: torch.optim.Optimizer | None = None, **nni_only: Any) -> None:
        who = self.display_name()
        unknown = sorted(set(nni_only) - set(_IGNORED))
        if unknown:
            raise PruningConfigError(f"{who} got unexpected arguments {unknown}.")
        if any(v is not None for v in nni_only.values()):
            warnings.warn(f"{who}: {sorted(k for k, v in nni_only.items() if v is not None)} have no effect here "
                          "(the model is traced; channels are ranked by the base masker, not reconstructed).",
                          UserWarning, stacklevel=2)
        check_evaluator(who, evaluator)
        self.evaluator, self.val_loader = evaluator, val_loader
        self.flops_ratio = check_fraction(who, "flops_ratio", flops_ratio, 1e-6, 1.0, closed_high=True)
        self.lbound = check_fraction(who, "lbound", lbound, 1e-6, 1.0, closed_high=True)
        self.rbound = check_fraction(who, "rbound", rbound, self.lbound, 1.0, closed_high=True)
        if reward not in REWARDS:
            raise PruningConfigError(f"{who} reward must be one of {', '.join(REWARDS)}, got {reward!r}.")
        if base_algo == "level":
            raise PruningConfigError(f"{who} allocates channels: base_algo must be l1, l2 or fpgm, not 'level'.")
        self.reward = reward
        self.channel_round = check_positive_int(who, "channel_round", channel_round)
        self.warmup = check_positive_int(who, "warmup", warmup, minimum=0)
        self.train_episode = check_positive_int(who, "train_episode", train_episode)
        self.init_delta, self.delta_decay = float(init_delta), check_fraction(who, "delta_decay", delta_decay, 0.0,
                                                                              1.0, closed_high=True)
        self.agent_args = {"hidden1": check_positive_int(who, "hidden1", hidden1),
                           "hidden2": check_positive_int(who, "hidden2", hidden2), "lr_actor": float(lr_a),
                           "lr_critic": float(lr_c), "discount": float(discount), "tau": float(tau),
                           "batch_size": check_positive_int(who, "bsize", bsize),
                           "replay_size": check_positive_int(who, "rmsize", rmsize),
                           "seed": 0 if seed is None else seed}
        if dummy_input is None and val_loader is not None:
            dummy_input = split_batch(next(iter(val_loader)))[0]
        if dummy_input is None:
            raise PruningConfigError(f"{who} counts MACs on an example input: pass dummy_input=... or val_loader=...")
        dummy_input = move_inputs(dummy_input, model_device(model))
        self.channel_macs = ChannelMacs(model, dummy_input)
        filled = [{**e, "sparsity": 1.0 - self.lbound} if isinstance(e, Mapping) and not (
            e.get("exclude") or "sparsity" in e or "sparsity_per_layer" in e) else e
            for e in config_list] if isinstance(config_list, (list, tuple)) else config_list
        self._init_allocation(model, base_algo, "maximize", output_dir)
        super().__init__(model, filled, optimizer, dummy_input)
        self.best_macs: float | None = None

    def _select_layers(self) -> list[tuple[str, nn.Module, dict[str, Any]]]:
        layers = Pruner._select_layers(self)
        shrinkable = self.channel_macs.coupling.shrinkable([name for name, _, _ in layers])
        kept = [name for name, _, _ in layers if name not in shrinkable]
        if kept:  # e.g. the classifier of "op_types": ["Conv2d", "Linear"]: pruning it would drop classes
            warnings.warn(f"AMCPruner leaves {kept} unpruned: the speedup cannot remove their channels (they reach "
                          "the model output or are tied to layers that are not selected).", UserWarning, stacklevel=4)
            layers = [entry for entry in layers if entry[0] in shrinkable]
        if not layers:
            raise PruningConfigError(f"AMCPruner: none of the selected layers {kept} has channels the speedup can "
                                     "remove; select the Conv/Linear layers inside the model (not its output layer).")
        for _, _, config in layers:
            config["max_sparsity_per_layer"] = min(float(config["sparsity"]), 1.0 - self.lbound)
        self.target_sparsity = 0.0
        return layers

    def _evaluate(self) -> float:
        if self.val_loader is not None:
            return self.score(lambda model: self.evaluator(self.val_loader, model))
        return self.score(self.evaluator)

    def _features(self) -> list[list[float]]:
        rows = []
        for t, name in enumerate(self.layer_names):
            module = self._wrapper(name).module
            kernel = getattr(module, "kernel_size", (1,))
            stride = getattr(module, "stride", (1,))
            rows.append([t, module.weight.shape[0], module.weight.shape[1], math.prod(kernel), stride[0],
                         self.channel_macs.full.get(name, 0)])
        tops = [max(abs(r[i]) for r in rows) or 1.0 for i in range(len(rows[0]))]
        return [[v / top for v, top in zip(r, tops, strict=True)] for r in rows]

    def _state(self, static: list[float], t: int, keep: Mapping[str, float], previous: float) -> list[float]:
        total = self.channel_macs.total or 1.0
        names = self.layer_names
        done = sum(self.channel_macs.full.get(n, 0) - self.channel_macs.layer_macs(n, keep) for n in names[:t])
        rest = sum(self.channel_macs.full.get(n, 0) for n in names[t + 1:])
        return [*static, done / total, rest / total, previous]

    def _max_keep(self, t: int, keep: Mapping[str, float], floor: Mapping[str, float]) -> float:
        """Largest keep ratio of layer ``t`` that leaves the budget reachable with later layers at their floor."""
        names, budget = self.layer_names, self.flops_ratio * self.channel_macs.total
        later = {n: floor[n] for n in names[t + 1:]}
        low, high = floor[names[t]], 1.0
        if self.channel_macs.macs({**keep, **later, names[t]: high}) <= budget:
            return high
        for _ in range(40):
            mid = (low + high) / 2
            fits = self.channel_macs.macs({**keep, **later, names[t]: mid}) <= budget
            low, high = (mid, high) if fits else (low, mid)
        return low

    def _kept(self, name: str, ratio: float, floor: float) -> float:
        channels = self.units(name)
        step = self.channel_round if channels >= self.channel_round else 1
        kept = max(step, int(ratio * channels + 1e-9) // step * step)
        return min(channels, max(kept, math.ceil(floor * channels - 1e-9))) / channels

    def search(self) -> Allocation:
        """Run ``train_episode`` episodes; return the allocation of the best reward within the budget."""
        agent = DDPGAgent(STATE_DIM, **self.agent_args)
        static = self._features()
        floor = {n: 1.0 - self.cap(n) for n in self.layer_names}
        best: tuple[float, Allocation, float] | None = None
        baseline = None
        for episode in range(self.train_episode):
            keep: dict[str, float] = {}
            steps, previous = [], 0.0
            for t, name in enumerate(self.layer_names):
                state = self._state(static[t], t, keep, previous)
                if episode < self.warmup:
                    action = agent.random_action()
                else:
                    action = agent.explore(state, self.init_delta * self.delta_decay ** (episode - self.warmup))
                ratio = min(max(self.lbound + action * (self.rbound - self.lbound), floor[name]),
                            self._max_keep(t, keep, floor))
                keep[name] = self._kept(name, ratio, floor[name])
                previous = min(max((keep[name] - self.lbound) / max(self.rbound - self.lbound, 1e-12), 0.0), 1.0)
                steps.append((state, previous))
            allocation = {n: 1.0 - keep[n] for n in self.layer_names}
            self.apply_allocation(allocation)
            metric, macs = self._evaluate(), self.channel_macs.macs(keep)
            reward = metric if self.reward == "acc_reward" else -(1.0 - metric) * math.log(max(macs, 1.0))
            self.record(allocation, metric, episode=episode, macs=macs, reward=reward)
            if macs <= self.flops_ratio * self.channel_macs.total * (1 + 1e-6) and (best is None or reward > best[0]):
                best = (reward, allocation, macs)
                self.best_score = metric
            baseline = reward if baseline is None else 0.95 * baseline + 0.05 * reward
            for t, (state, action) in enumerate(steps):
                last = t == len(steps) - 1
                following = steps[t + 1][0] if not last else state
                agent.remember(state, action, reward - baseline, following, last)
            if episode >= self.warmup:
                for _ in steps:
                    agent.update()
        if best is None:
            raise PruningConfigError(
                f"AMCPruner: no episode met flops_ratio={self.flops_ratio}: even with every selected layer at its "
                "minimum the model keeps more MACs. Raise flops_ratio, lower lbound, or select more layers.")
        _, allocation, self.best_macs = best
        return allocation
