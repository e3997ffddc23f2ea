"""Training of the PERP recoverers (not an algorithm): Pruna's finetuner settings on slimkit's one loop.

:func:`train` runs :func:`slimkit.training.fit` on the parameters the recoverer chose, with AdamW (or
bitsandbytes' 8-bit AdamW), gradient accumulation (:class:`_Accumulate`), a linear warm-up + cosine schedule and a
held-out perplexity before and after; :func:`keep_zeros` keeps a pruned matrix's zeros while it trains.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from slimkit.algorithms.recovery._training import val_batches, validation_loss
from slimkit.core.contract import SmashConfigPrefixWrapper
from slimkit.errors import ConfigError, MissingPackageError
from slimkit.training import default_loss, fit

#: Pruna's warm-up length; short runs warm up over their first tenth instead
WARMUP_STEPS = 100
#: validation batches scored for the held-out perplexity before and after training
VAL_BATCHES = 4


class _ZeroGrad:
    """A gradient hook that keeps a pruned weight's zeros at zero (AdamW leaves a weight whose gradient is 0 alone)."""

    def __init__(self, param: nn.Parameter) -> None:
        mask = param.detach() != 0
        self.zeros = int((~mask).sum())
        self.handle = param.register_hook(lambda grad: grad * mask)

    def remove(self) -> None:
        """Take the hook off."""
        self.handle.remove()


def keep_zeros(params: list[nn.Parameter]) -> list[_ZeroGrad]:
    """Hooks on each matrix among ``params`` holding zeros (a pruned head) so training keeps them zero."""
    return [_ZeroGrad(p) for p in params if p.dim() >= 2 and bool((p == 0).any())]


class _Accumulate(torch.optim.Optimizer):
    """A view of ``inner`` that steps every ``every`` calls and clears gradients only after a real step."""

    def __init__(self, inner: torch.optim.Optimizer, every: int) -> None:  # noqa: D107 -- a view, no super().__init__
        self.inner, self.every, self.calls = inner, every, 0
        self.param_groups, self.defaults, self.state = inner.param_groups, inner.defaults, inner.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear gradients at the start of an accumulation window."""
        if self.calls % self.every == 0:
            self.inner.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        """Count a batch; step the inner optimizer when the window is full."""
        self.calls += 1
        if self.calls % self.every == 0:
            self.inner.step()


def _optimizer_class(name: str) -> Any:
    """AdamW from torch, or bitsandbytes' 8-bit one named ``name`` (a clear error when bitsandbytes is missing)."""
    if name == "AdamW":
        return torch.optim.AdamW
    try:
        import bitsandbytes
    except ImportError as exc:
        raise MissingPackageError(f"optimizer={name!r} comes from bitsandbytes: pip install bitsandbytes, or set the "
                                  "recoverer's optimizer to 'AdamW' (torch's, the default).") from exc
    return getattr(bitsandbytes.optim, name)


def check_settings(smash_config: SmashConfigPrefixWrapper, desc: str) -> None:
    """Refuse, before any work, the legal settings that cannot run here (reporting, a missing optimizer)."""
    if smash_config["report_to"] != "none":
        raise ConfigError(f"{desc}_report_to={smash_config['report_to']!r}: slimkit records the training in the "
                          f"save's state (train_steps, final_loss, perplexities) and reports nowhere else; set "
                          f"cfg['{desc}_report_to'] = 'none'.")
    _optimizer_class(str(smash_config["optimizer"]))


def _schedule(total: int) -> Any:
    warmup = min(WARMUP_STEPS, max(1, total // 10))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))

    return factor


def _perplexity(model: nn.Module, batches: Any) -> float:
    return round(math.exp(validation_loss(model, batches, max_batches=VAL_BATCHES)), 4)


def train(model: nn.Module, params: list[nn.Parameter], smash_config: SmashConfigPrefixWrapper, desc: str) -> None:
    """Train ``params`` of ``model`` on ``cfg.data`` (next-token loss) with Pruna's settings; record the outcome."""
    seed, every = int(smash_config["seed"]), int(smash_config["gradient_accumulation_steps"])
    loader = smash_config.data.train_dataloader(batch_size=int(smash_config["training_batch_size"]), shuffle=True,
                                                generator=torch.Generator().manual_seed(seed))
    total = max(1, math.ceil(float(smash_config["num_epochs"]) * len(loader) / every))
    if int(smash_config["steps"]):
        total = min(total, int(smash_config["steps"]))
    val = val_batches(smash_config, int(smash_config["training_batch_size"]))
    state = smash_config.state
    if val is not None:
        state["val_perplexity_before"] = _perplexity(model, val)
    inner = _optimizer_class(str(smash_config["optimizer"]))(params, lr=float(smash_config["learning_rate"]),
                                                             weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(inner, _schedule(total))
    optimizer = _Accumulate(inner, every)

    def on_step(step: int, _loss: float) -> None:
        if step % every == 0:
            scheduler.step()

    threads, seconds = int(smash_config["num_threads"]), float(smash_config["max_seconds"])
    result = fit(model, loader, loss=lambda m, b: default_loss(m, b) / every, optimizer=optimizer,
                 epochs=math.ceil(float(smash_config["num_epochs"])), steps=total * every, seed=seed,
                 num_threads=threads or None, desc=desc, max_seconds=seconds or None, on_step=on_step)
    if val is not None:
        state["val_perplexity_after"] = _perplexity(model, val)
    state.update(train_steps=optimizer.calls // every, final_loss=round(result.final_loss * every, 6),
                 stopped_early=result.stopped_early)
