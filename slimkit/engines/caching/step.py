"""Step cache (DeepCache): a diffusion UNet reuses its deep features across denoising steps.

In a sampling loop the UNet runs once per step with a falling timestep. High-level features (the deep down
blocks, the mid block and the deep up blocks) change little from one step to the next, so every ``interval``-th
step runs the whole UNet and records those blocks' outputs, and the steps between run only the shallow path
(``conv_in``, the first ``branch + 1`` down blocks, the last ``branch + 1`` up blocks, the output head), fed with
the recorded deep feature and fresh skip connections (Ma et al., DeepCache, CVPR 2024).

A call whose timestep is not below the previous call's (a new sampling run, or the same step again), or whose
sample shape changed, runs in full: outside a sampling loop the model behaves exactly as without the cache.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from slimkit.engines._patch import patch_forward


def _timestep_value(args: tuple, kwargs: dict) -> float | None:
    value = kwargs.get("timestep", args[1] if len(args) > 1 else None)
    if isinstance(value, torch.Tensor):
        return float(value.max()) if value.numel() else None
    return float(value) if isinstance(value, (int, float)) else None


def _sample_shape(args: tuple, kwargs: dict) -> tuple[int, ...] | None:
    value = kwargs.get("sample", args[0] if args else None)
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


class _DeepBlock:
    """Forward patch of one deep block: records its output on full steps, returns the record on cached steps."""

    def __init__(self, cache: DeepFeatureCache, name: str) -> None:
        self.cache, self.name = cache, name

    def __call__(self, module: torch.nn.Module, inner: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        mode = self.cache.mode
        if mode == "cached":
            return self.cache.outputs[self.name]
        output = inner(*args, **kwargs)
        if mode == "full":
            self.cache.outputs[self.name] = output
        self.cache.block_calls += 1
        return output


class DeepFeatureCache:
    """Decides per UNet call whether to run in full (and record the deep blocks) or reuse the recorded features.

    ``stats()`` counts full and cached steps; ``reset()`` makes the next call a full one.
    """

    def __init__(self, interval: int, branch: int) -> None:
        if interval < 1 or branch < 0:
            raise ValueError(f"need interval >= 1 and branch >= 0; got {interval} and {branch}.")
        self.interval, self.branch = interval, branch
        self.mode = "off"
        self.outputs: dict[str, Any] = {}
        self.deep_blocks: list[str] = []
        self._step, self._last_t, self._last_shape = 0, None, None
        self._lock = threading.Lock()
        self.full_steps = self.cached_steps = self.block_calls = 0

    def __deepcopy__(self, memo: dict) -> DeepFeatureCache:
        """A copy starts with nothing recorded; the copied blocks' patches share it (deepcopy's memo)."""
        copy = DeepFeatureCache(self.interval, self.branch)
        copy.deep_blocks = list(self.deep_blocks)
        return copy

    def reset(self) -> None:
        """Forget the recorded features: the next call runs in full."""
        with self._lock:
            self._last_t = None
            self.outputs = {}

    def stats(self) -> dict[str, Any]:
        """Full and cached step counts, the interval, the branch and the blocks skipped on cached steps."""
        return {"full_steps": self.full_steps, "cached_steps": self.cached_steps, "interval": self.interval,
                "branch": self.branch, "deep_blocks": list(self.deep_blocks)}

    def __call__(self, module: torch.nn.Module, inner: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """Run the UNet for one denoising step, in full or on the recorded deep features."""
        if module.training:
            return inner(*args, **kwargs)
        t, shape = _timestep_value(args, kwargs), _sample_shape(args, kwargs)
        with self._lock:
            continuing = (t is not None and self._last_t is not None and t < self._last_t and shape == self._last_shape
                          and len(self.outputs) == len(self.deep_blocks))
            self._step = self._step + 1 if continuing else 0
            full = self._step % self.interval == 0
            self.mode = "full" if full else "cached"
            try:
                output = inner(*args, **kwargs)
            finally:
                self.mode = "off"
            self._last_t, self._last_shape = t, shape
            if full:
                self.full_steps += 1
            else:
                self.cached_steps += 1
            return output


def deep_blocks(unet: torch.nn.Module, branch: int) -> list[tuple[str, torch.nn.Module]]:
    """The blocks a cached step skips (empty when the UNet has no block below ``branch``).

    They are the down blocks after ``branch``, the mid block and the up blocks before the last ``branch + 1``.
    """
    down, up = list(unet.down_blocks), list(unet.up_blocks)
    if branch + 1 >= len(down) or len(up) != len(down):
        return []
    blocks = [(f"down_blocks.{i}", b) for i, b in enumerate(down) if i > branch]
    if getattr(unet, "mid_block", None) is not None:
        blocks.append(("mid_block", unet.mid_block))
    blocks += [(f"up_blocks.{i}", b) for i, b in enumerate(up) if i < len(up) - branch - 1]
    return blocks


def attach_step_cache(unet: torch.nn.Module, interval: int, branch: int = 0) -> torch.nn.Module:
    """Make ``unet`` (a diffusers UNet2DModel / UNet2DConditionModel) reuse its deep features between full steps.

    The cache is ``unet.step_cache``; the state dict is unchanged (the blocks' forwards are patched in place).
    """
    blocks = deep_blocks(unet, branch)
    if not blocks:
        raise ValueError(f"branch={branch} leaves no deep block to reuse in a UNet with {len(unet.down_blocks)} down "
                         f"blocks; use a branch below {len(unet.down_blocks) - 1}.")
    cache = DeepFeatureCache(interval, branch)
    for name, block in blocks:
        patch_forward(block, "step_cache_block", _DeepBlock(cache, name))
        cache.deep_blocks.append(name)
    return patch_forward(unet, "step_cache", cache)


__all__ = ["DeepFeatureCache", "attach_step_cache", "deep_blocks"]
