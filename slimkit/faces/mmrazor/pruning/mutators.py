"""MMRazor's channel mutators as config objects over slimkit's channel units.

``dict(type='ChannelMutator', channel_unit_cfg=dict(type='L1MutableChannelUnit', default_args=dict(
choice_mode='ratio')), parse_cfg=dict(type='ChannelAnalyzer', demo_input=(1, 3, 224, 224)))`` builds a
:class:`ChannelMutator`; :meth:`ChannelMutator.prepare_from_supernet` finds the coupled channel groups with
slimkit's tracer (:class:`~slimkit.engines.pruning.channel_units.ChannelUnits`; ``tracer_type`` is read and
not needed) on a random input of ``demo_input``'s shape. Units are named as MMRazor names them
(``'backbone.layer1.0.conv1_(0, 64)_64'``), so its ``target_pruning_ratio`` and ``units`` dicts apply.

``channel_unit_cfg.units``: ``{unit: {'init_args': {'candidate_choices': [...]}, 'choice': c}}`` or a JSON
file holding that (MMRazor's ``get_channel_units.py`` output); ``default_args.choice_mode``: ``'ratio'`` or
``'number'``. Which channels a choice keeps follows the unit type: ``L1MutableChannelUnit`` the largest L1
norms, the sequential ones (``SequentialMutableChannelUnit``, ``OneShotMutableChannelUnit``,
``SlimmableChannelUnit``, ``DCFFChannelUnit``, ``DMCPChannelUnit``) the first channels.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from slimkit.engines.pruning.channel_units import ChannelUnits
from slimkit.engines.pruning.unit import ChannelUnit
from slimkit.errors import ConfigError, closest
from slimkit.faces.mmrazor.builder import register_module

#: MMRazor's unit types -> which channels a choice keeps
UNIT_CRITERIA: dict[str, str] = {
    "L1MutableChannelUnit": "l1",
    "SequentialMutableChannelUnit": "sequential",
    "OneShotMutableChannelUnit": "sequential",
    "SlimmableChannelUnit": "sequential",
    "DCFFChannelUnit": "sequential",
    "DMCPChannelUnit": "sequential",
    "GroupFisherChannelUnit": "fisher",
}
PARSERS = ("ChannelAnalyzer", "BackwardTracer")
_UNIT_KEYS = ("type", "default_args", "units")


def mapping(value: Any, what: str) -> dict[str, Any]:
    """``value`` as a dict (None: empty); anything else is a ConfigError naming ``what``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{what} must be a dict, got {type(value).__name__} {value!r}.")
    return dict(value)


def _candidates(value: Any, what: str) -> list[float | int]:
    """``value`` as a list of kept ratios or channel counts (each > 0); anything else is a ConfigError."""
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(c, (int, float)) and not isinstance(c, bool) and c > 0 for c in value):
        raise ConfigError(f"{what} must be a list of kept ratios or channel counts (> 0), got {value!r}.")
    return list(value)


def _pose_input_shape(model: nn.Module) -> tuple[int, ...] | None:
    """(1, 3, height, width) of a top-down pose model's ``head.decoder.input_size`` (MMPose: width, height)."""
    size = getattr(getattr(getattr(model, "head", None), "decoder", None), "input_size", None)
    if isinstance(size, (list, tuple)) and len(size) == 2 and all(isinstance(s, int) and s > 0 for s in size):
        return (1, 3, size[1], size[0])
    return None


def _demo_input(parse_cfg: Mapping[str, Any], model: nn.Module) -> torch.Tensor:
    """A random input of ``parse_cfg.demo_input``'s shape, else of a pose model's input size, else 224x224.

    MMRazor's pose demo input reads ``head.decoder.input_size`` the same way.
    """
    shape = parse_cfg.get("demo_input", _pose_input_shape(model) or (1, 3, 224, 224))
    if isinstance(shape, Mapping):  # dict(type='DefaultDemoInput', input_shape=...)
        shape = shape.get("input_shape", (1, 3, 224, 224))
    if not isinstance(shape, (list, tuple)) or not shape or not all(isinstance(s, int) and s > 0 for s in shape):
        raise ConfigError(f"parse_cfg.demo_input must be an input shape such as (1, 3, 224, 224), got {shape!r}.")
    return torch.rand(*shape)


def _read_units(units: Any) -> dict[str, Any]:
    if units is None:
        return {}
    if isinstance(units, (str, Path)):
        path = Path(units)
        if path.suffix != ".json" or not path.is_file():
            raise ConfigError(f"channel_unit_cfg.units={str(units)!r}: give a .json file of units that exists, or "
                              "the dict itself.")
        try:
            units = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(f"channel_unit_cfg.units={str(path)!r} is not valid JSON: {exc}.") from exc
    if not isinstance(units, Mapping):
        raise ConfigError(f"channel_unit_cfg.units must be a dict of unit name -> dict(init_args=..., choice=...) "
                          f"or a .json file of it, got {type(units).__name__}.")
    out: dict[str, Any] = {}
    for name, entry in units.items():
        entry = mapping(entry, f"channel_unit_cfg.units[{name!r}]")
        init = mapping(entry.get("init_args"), f"channel_unit_cfg.units[{name!r}].init_args")
        choices = _candidates(init.get("candidate_choices", []),
                              f"channel_unit_cfg.units[{name!r}].init_args.candidate_choices")
        out[str(name)] = {**entry, "init_args": {**init, "candidate_choices": choices}}
    return out


@register_module(kind="mutator")
class ChannelMutator:
    """Channel units of a model and their choices (MMRazor's ``ChannelMutator``).

    ``channel_unit_cfg``: ``dict(type=<unit type>, default_args=dict(...), units=...)``; ``parse_cfg``:
    ``dict(type='ChannelAnalyzer', demo_input=shape, tracer_type=...)``. ``exclude``: layers whose units are
    never pruned (slimkit's addition). ``custom_groups`` and ``init_cfg`` are accepted and unused.
    """

    default_unit: ClassVar[str] = "SequentialMutableChannelUnit"
    default_choice_mode: ClassVar[str] = "ratio"
    unit_types: ClassVar[tuple[str, ...]] = ("L1MutableChannelUnit", "SequentialMutableChannelUnit")

    def __init__(self, channel_unit_cfg: Mapping[str, Any] | None = None,
                 parse_cfg: Mapping[str, Any] | None = None, custom_groups: Any = None,
                 init_cfg: Mapping[str, Any] | None = None, exclude: list[str] | tuple[str, ...] = ()) -> None:
        unit_cfg = mapping(channel_unit_cfg, "channel_unit_cfg") or {"type": self.default_unit}
        unknown = [k for k in unit_cfg if k not in _UNIT_KEYS]
        if unknown:
            raise ConfigError(f"{type(self).__name__} channel_unit_cfg has no key {unknown[0]!r}."
                              f"{closest(unknown[0], _UNIT_KEYS)} Keys: {', '.join(_UNIT_KEYS)}.")
        self.unit_type = str(unit_cfg.get("type", self.default_unit)).removeprefix("mmrazor.")
        if self.unit_type not in self.unit_types:
            raise ConfigError(f"{type(self).__name__} takes channel units of type {', '.join(self.unit_types)}; got "
                              f"{self.unit_type!r}.{closest(self.unit_type, self.unit_types)}")
        self.default_args = mapping(unit_cfg.get("default_args"), "channel_unit_cfg.default_args")
        self.choice_mode = self.default_args.get("choice_mode", self.default_choice_mode)
        if self.choice_mode not in ("ratio", "number"):
            raise ConfigError(f"default_args.choice_mode must be 'ratio' or 'number', got {self.choice_mode!r}.")
        self.units_cfg = _read_units(unit_cfg.get("units"))
        parse = mapping(parse_cfg, "parse_cfg") or {"type": "ChannelAnalyzer"}
        if str(parse.get("type", "ChannelAnalyzer")).removeprefix("mmrazor.") not in PARSERS:
            raise ConfigError(f"parse_cfg type must be one of {', '.join(PARSERS)} (slimkit traces the model "
                              f"itself), got {parse.get('type')!r}.")
        self.parse_cfg = parse
        if not isinstance(exclude, (list, tuple)) or not all(isinstance(e, str) for e in exclude):
            raise ConfigError(f"exclude must be a list of layer names, got {exclude!r}.")
        self.exclude = tuple(exclude)
        self.criterion = UNIT_CRITERIA[self.unit_type]
        self.channel_units: ChannelUnits | None = None

    # --- preparing ------------------------------------------------------------------------------------------
    def unit_kwargs(self) -> dict[str, Any]:
        """Keywords for :class:`ChannelUnits` from ``default_args`` (none by default)."""
        return {}

    def prepare_from_supernet(self, supernet: nn.Module, dummy_input: Any = None) -> None:
        """Find the model's channel units (on ``dummy_input``, else a random ``parse_cfg.demo_input``)."""
        dummy = _demo_input(self.parse_cfg, supernet) if dummy_input is None else dummy_input
        try:
            self.channel_units = ChannelUnits(supernet, dummy, exclude=self.exclude, **self.unit_kwargs())
        except (RuntimeError, TypeError, ValueError) as exc:
            raise ConfigError(f"{type(self).__name__}: tracing the model on an input of shape "
                              f"{tuple(getattr(dummy, 'shape', ()))} failed ({type(exc).__name__}: "
                              f"{str(exc)[:200]}); set parse_cfg=dict(type='ChannelAnalyzer', "
                              "demo_input=<the model's input shape>).") from exc
        self.channel_units.attach()
        for name in self.units_cfg:
            self.channel_units.resolve(name)  # an unknown unit name fails here, naming the real ones

    @property
    def prepared(self) -> ChannelUnits:
        """The channel units (ConfigError before :meth:`prepare_from_supernet`)."""
        if self.channel_units is None:
            raise ConfigError(f"{type(self).__name__}.prepare_from_supernet(model) was not called.")
        return self.channel_units

    @property
    def mutable_units(self) -> list[ChannelUnit]:
        """The units (MMRazor's name)."""
        return self.prepared.units

    # --- choices --------------------------------------------------------------------------------------------
    def check_choice(self, unit: ChannelUnit, choice: Any) -> float | int:
        """``choice`` checked against ``choice_mode`` (a ratio in (0, 1] or a channel count)."""
        if self.choice_mode == "ratio" and not (isinstance(choice, (int, float)) and 0 < float(choice) <= 1):
            raise ConfigError(f"unit {unit.name}: choice_mode='ratio' takes kept ratios in (0, 1], got {choice!r}.")
        return float(choice) if self.choice_mode == "ratio" else choice

    def set_choices(self, choices: Mapping[str, Any]) -> None:
        """Keep, per unit name (or a layer of it), the chosen ratio / number of channels."""
        units = self.prepared
        for name, choice in choices.items():
            unit = units.resolve(name)
            units.choose(unit, self.check_choice(unit, choice), "sequential" if self.criterion == "fisher"
                         else self.criterion)

    @property
    def current_choices(self) -> dict[str, float | int]:
        """The current choice of every unit, in ``choice_mode``."""
        return {u.name: (u.activated_channels / u.num_channels if self.choice_mode == "ratio" else
                         u.activated_channels) for u in self.mutable_units}

    def choice_template(self) -> dict[str, float | int]:
        """The full-width choices (MMRazor's template for ``target_pruning_ratio``)."""
        return {u.name: (1.0 if self.choice_mode == "ratio" else u.num_channels) for u in self.mutable_units}

    def candidates(self, unit: ChannelUnit) -> list[float | int]:
        """The ``candidate_choices`` the units config gives ``unit`` (empty: none)."""
        entry = self.units_cfg.get(unit.name) or next(
            (v for k, v in self.units_cfg.items() if self.prepared.resolve(k) is unit), None)
        return list(entry["init_args"]["candidate_choices"]) if entry else []


@register_module(kind="mutator")
class OneShotChannelMutator(ChannelMutator):
    """Units with ``candidate_choices`` (``default_args`` or per unit); samples, max and min subnets."""

    default_unit = "OneShotMutableChannelUnit"
    unit_types = ("OneShotMutableChannelUnit", "SequentialMutableChannelUnit", "L1MutableChannelUnit")

    def choices_of(self, unit: ChannelUnit) -> list[float | int]:
        """The unit's candidates (its own, else ``default_args.candidate_choices``, else full width)."""
        default = self.default_args.get("candidate_choices") or [self.choice_template()[unit.name]]
        default = _candidates(default, "default_args.candidate_choices")
        return self.candidates(unit) or default

    def sample_choices(self) -> dict[str, float | int]:
        """A random candidate per unit (Python's ``random``)."""
        return {u.name: random.choice(self.choices_of(u)) for u in self.mutable_units}

    def max_choices(self) -> dict[str, float | int]:
        """The largest candidate per unit."""
        return {u.name: max(self.choices_of(u)) for u in self.mutable_units}

    def min_choices(self) -> dict[str, float | int]:
        """The smallest candidate per unit."""
        return {u.name: min(self.choices_of(u)) for u in self.mutable_units}


@register_module(kind="mutator")
class SlimmableChannelMutator(OneShotChannelMutator):
    """Every unit lists the same number of candidates; candidate ``i`` of every unit makes subnet ``i``."""

    default_unit = "SlimmableChannelUnit"
    default_choice_mode = "number"
    unit_types = ("SlimmableChannelUnit",)

    @property
    def subnets(self) -> list[dict[str, float | int]]:
        """The subnets, widest config first as written (``units`` must give every unit's candidates)."""
        if not self.units_cfg:
            raise ConfigError("SlimmableChannelMutator needs channel_unit_cfg.units: {unit: dict(init_args=dict("
                              "candidate_choices=[...]))} (or a .json file of it), one list per unit, equally long.")
        lists = {name: entry["init_args"]["candidate_choices"] for name, entry in self.units_cfg.items()}
        lengths = {len(v) for v in lists.values()}
        if len(lengths) != 1 or 0 in lengths:
            raise ConfigError(f"SlimmableChannelMutator: every unit must list the same number (>= 1) of "
                              f"candidate_choices; got {sorted({k: len(v) for k, v in lists.items()}.items())}.")
        return [{name: values[i] for name, values in lists.items()} for i in range(lengths.pop())]


@register_module(kind="mutator")
class DCFFChannelMutator(ChannelMutator):
    """The units DCFF fuses filters in (sequential units, ratios)."""

    default_unit = "DCFFChannelUnit"
    unit_types = ("DCFFChannelUnit",)


@register_module(kind="mutator")
class DMCPChannelMutator(ChannelMutator):
    """The units DMCP learns widths of; ``pruning_cfg=(min_rate, max_rate, rate_offset)`` splits each unit."""

    default_unit = "DMCPChannelUnit"
    default_choice_mode = "number"
    unit_types = ("DMCPChannelUnit",)

    def __init__(self, channel_unit_cfg: Mapping[str, Any] | None = None,
                 parse_cfg: Mapping[str, Any] | None = None,
                 pruning_cfg: tuple[float, float, float] | list[float] = (0.1, 1.0, 0.05), **kwargs: Any) -> None:
        super().__init__(channel_unit_cfg, parse_cfg, **kwargs)
        if (not isinstance(pruning_cfg, (list, tuple)) or len(pruning_cfg) != 3
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in pruning_cfg)
                or not 0 < pruning_cfg[0] < pruning_cfg[1] <= 1 or not 0 < pruning_cfg[2] <= 1):
            raise ConfigError(f"DMCPChannelMutator pruning_cfg must be (min_rate, max_rate, rate_offset) with "
                              f"0 < min_rate < max_rate <= 1 and 0 < rate_offset <= 1, got {pruning_cfg!r}.")
        self.pruning_cfg = tuple(float(v) for v in pruning_cfg)


@register_module(kind="mutator")
class GroupFisherChannelMutator(ChannelMutator):
    """GroupFisher's units: ``default_args=dict(normalization_type='flops'|'act'|'none', mutate_linear=False)``."""

    default_unit = "GroupFisherChannelUnit"
    unit_types = ("GroupFisherChannelUnit",)

    def unit_kwargs(self) -> dict[str, Any]:
        """``mutate_linear`` (default False: units read by a Linear layer are left alone, as in MMRazor)."""
        value = self.default_args.get("mutate_linear", False)
        if not isinstance(value, bool):
            raise ConfigError(f"default_args.mutate_linear must be True or False, got {value!r}.")
        return {"mutate_linear": value}

    @property
    def normalization_type(self) -> str:
        """``default_args.normalization_type`` (default ``'flops'``)."""
        return str(self.default_args.get("normalization_type", "flops"))
