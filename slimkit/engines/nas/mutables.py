"""Mutables: the searchable parts of a supernet (MMRazor's ``OneShotMutableOP``, mutable channels and depth).

A mutable holds a list of ``choices`` and a ``current_choice``; the supernet runs the current choice. Setting
a choice that is not in the list raises ConfigError naming the valid ones. :meth:`BaseMutable.export` gives
the plain module the current choice stands for (no mutable left), used by
:func:`~slimkit.engines.nas.export_subnet`.

* :class:`OneShotMutableOP` -- one of several candidate ops by name (``{"k3": conv3, "k5": conv5}``).
* :class:`MutableChannels` -- a width: how many of a layer's channels are active. Share one object between a
  producer's ``out_channels`` and its consumers' ``in_channels`` (:mod:`slimkit.engines.nas.dynamic_ops`).
* :class:`MutableSequential` -- a depth: the first ``d`` of its blocks run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.core.registry import build_module, register_component
from slimkit.errors import ConfigError, closest

Choice = Any


def _validate_choices(owner: str, choices: Sequence[Choice]) -> list[Choice]:
    if isinstance(choices, (str, bytes)) or not isinstance(choices, Sequence) or not choices:
        raise ConfigError(f"{owner} needs a non-empty list of choices, got {choices!r}.")
    choices = list(choices)
    if len(set(map(repr, choices))) != len(choices):
        raise ConfigError(f"{owner} choices must be distinct, got {choices!r}.")
    return choices


class BaseMutable(nn.Module):
    """A searchable choice inside a supernet: ``choices``, ``current_choice`` (default: the last one)."""

    def __init__(self, choices: Sequence[Choice], init_choice: Choice | None = None) -> None:
        super().__init__()
        self._choices = _validate_choices(type(self).__name__, choices)
        self._current = self._choices[-1]
        if init_choice is not None:
            self.current_choice = init_choice

    @property
    def choices(self) -> list[Choice]:
        """The candidate values, in order."""
        return list(self._choices)

    @property
    def current_choice(self) -> Choice:
        """The active choice."""
        return self._current

    @current_choice.setter
    def current_choice(self, choice: Choice) -> None:
        choice = self.canonical_choice(choice)
        if choice not in self._choices:
            hint = closest(str(choice), [str(c) for c in self._choices]) if isinstance(choice, str) else ""
            raise ConfigError(f"{choice!r} is not a choice of this {type(self).__name__}.{hint} Valid choices: "
                              f"{', '.join(repr(c) for c in self._choices)}.")
        self._current = choice

    def canonical_choice(self, choice: Choice) -> Choice:
        """``choice`` as it appears in :attr:`choices` (subclasses accept other spellings, e.g. a list for a tuple)."""
        return choice

    def unused_paths(self, choice: Choice) -> list[str]:
        """Submodule paths (relative) that ``choice`` leaves out: mutables inside them need no choice."""
        return []

    def export(self) -> nn.Module | None:
        """The plain module for the current choice (``None``: the mutable disappears from the exported model)."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        """The choices and the current one, for ``print(model)``."""
        return f"choices={self._choices}, current={self._current!r}"


class OneShotMutableOP(BaseMutable):
    """One op among named candidates (e.g. kernel sizes ``{"k3": ..., "k5": ..., "k7": ...}`` or op types).

    ``candidates``: a mapping name -> module (or a config dict built with :func:`~slimkit.razor.build`). Every
    candidate keeps its own weights; the forward runs only the chosen one. ``module_kwargs`` (MMRazor's) are
    fields added to every candidate config, e.g. ``dict(in_channels=16, out_channels=64, stride=2)`` from the
    search space that places the op. ``alias`` (MMRazor's): a name several mutables share; a subnet entry under
    that name sets all of them (:meth:`~slimkit.engines.nas.NasMutator.set_choices`).
    """

    def __init__(self, candidates: Mapping[str, nn.Module | Mapping[str, Any]], init_choice: str | None = None,
                 module_kwargs: Mapping[str, Any] | None = None, alias: str | None = None) -> None:
        if not isinstance(candidates, Mapping) or not candidates:
            raise ConfigError(f"OneShotMutableOP needs a non-empty mapping name -> module, got {candidates!r}.")
        bad = [k for k in candidates if not isinstance(k, str) or not k.isidentifier()]
        if bad:
            raise ConfigError(f"OneShotMutableOP candidate names must be identifiers such as 'k3', got {bad!r}.")
        super().__init__(list(candidates), init_choice)
        if alias is not None and not isinstance(alias, str):
            raise ConfigError(f"OneShotMutableOP alias must be a string, got {alias!r}.")
        self.alias = alias
        extra = dict(module_kwargs or {})
        self.candidates = nn.ModuleDict({
            k: build_module({**v, **extra} if isinstance(v, Mapping) else v, f"candidate {k!r}")
            for k, v in candidates.items()})

    def unused_paths(self, choice: Choice) -> list[str]:
        """The candidates not chosen."""
        return [f"candidates.{c}" for c in self._choices if c != choice]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the chosen candidate."""
        return self.candidates[self.current_choice](*args, **kwargs)

    def export(self) -> nn.Module:
        """The chosen candidate (further mutables inside it are exported by :func:`export_subnet`)."""
        return self.candidates[self.current_choice]


class MutableChannels(BaseMutable):
    """A width: how many channels of the layers that share it are active (one of ``choices``, positive ints).

    It has no forward. Dynamic layers (:class:`~slimkit.engines.nas.DynamicConv2d`, ``DynamicLinear``,
    ``DynamicBatchNorm2d``) take it as their channel count and slice their full-width weights to the first
    ``current_choice`` channels, so every width shares the same weights (the widest holds them all).
    """

    def __init__(self, choices: Sequence[int], init_choice: int | None = None) -> None:
        if isinstance(choices, Sequence) and any(isinstance(c, bool) or not isinstance(c, int) or c < 1
                                                 for c in choices):
            raise ConfigError(f"MutableChannels choices must be positive integers, got {list(choices)!r}.")
        super().__init__(sorted(_validate_choices("MutableChannels", choices)), init_choice)

    @property
    def max_choice(self) -> int:
        """The widest choice: the size of the weights."""
        return max(self._choices)

    def forward(self, *args: Any) -> Any:
        """Not callable: a width is read by the dynamic layers that share it."""
        raise ConfigError("MutableChannels holds a width and has no forward; pass it as the in/out channels of "
                          "DynamicConv2d, DynamicLinear or DynamicBatchNorm2d.")

    def export(self) -> None:
        """A width disappears from the exported model (its layers become plain layers of that width)."""
        return None


def channels_of(value: int | Sequence[int] | MutableChannels, what: str) -> MutableChannels | int:
    """A fixed int, or a :class:`MutableChannels` (a list of ints makes a new one)."""
    if isinstance(value, MutableChannels):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, Sequence) and not isinstance(value, str):
        return MutableChannels(value)
    raise ConfigError(f"{what} must be a positive int, a list of widths or a MutableChannels, got {value!r}.")


def active(channels: MutableChannels | int) -> int:
    """The active channel count of a fixed int or a width mutable."""
    return channels.current_choice if isinstance(channels, MutableChannels) else channels


def widest(channels: MutableChannels | int) -> int:
    """The channel count of the weights (the widest choice)."""
    return channels.max_choice if isinstance(channels, MutableChannels) else channels


class MutableSequential(BaseMutable):
    """A depth: the first ``current_choice`` of ``blocks`` run, in order (``0`` runs none: the identity).

    ``depth_choices`` default to ``1..len(blocks)``. Blocks past the shallowest depth must keep their input's
    shape (they may be skipped).
    """

    def __init__(self, blocks: Sequence[nn.Module | Mapping[str, Any]], depth_choices: Sequence[int] | None = None,
                 init_choice: int | None = None) -> None:
        blocks = [build_module(b, f"block {i}") for i, b in enumerate(blocks or [])]
        if not blocks:
            raise ConfigError("MutableSequential needs at least one block.")
        depth_choices = list(range(1, len(blocks) + 1)) if depth_choices is None else depth_choices
        if isinstance(depth_choices, Sequence) and any(
                isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= len(blocks) for d in depth_choices):
            raise ConfigError(f"MutableSequential depth_choices must be ints in 0..{len(blocks)} (it has "
                              f"{len(blocks)} blocks), got {list(depth_choices)!r}.")
        super().__init__(sorted(_validate_choices("MutableSequential", depth_choices)), init_choice)
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the first ``current_choice`` blocks."""
        for block in self.blocks[: self.current_choice]:
            x = block(x)
        return x

    def export(self) -> nn.Module:
        """An ``nn.Sequential`` of the active blocks (``nn.Identity`` for depth 0)."""
        if self.current_choice == 0:
            return nn.Identity()
        return nn.Sequential(*self.blocks[: self.current_choice])


for _cls in (OneShotMutableOP, MutableChannels, MutableSequential):
    register_component(_cls, "mutable")
