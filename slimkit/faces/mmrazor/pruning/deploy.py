"""MMRazor's pruned-model builders ``GroupFisherDeploySubModel`` and ``GroupFisherSubModel``.

``GroupFisherDeploySubModel`` puts a pruning structure on a fresh architecture (for deployment);
``GroupFisherSubModel`` makes a pruning algorithm's result a static model (for fine-tuning).

Both return the architecture physically shrunk by slimkit's speedup (its ``kept_channels`` attribute is the replay
record). ``divisor`` rounds every unit's kept channels up to a multiple of it (never above the unit's width): the
widths MMRazor's ``make_channel_divisible`` post-process gives; the extra channels are the next ones in order.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from torch import nn

from slimkit.core.registry import build_component, build_module
from slimkit.engines.pruning.channel_units import ChannelUnits
from slimkit.errors import ConfigError
from slimkit.faces.mmrazor.builder import register_module
from slimkit.faces.mmrazor.pruning.base import PruningAlgorithm
from slimkit.faces.mmrazor.pruning.mutators import ChannelMutator

log = logging.getLogger(__name__)


def _divisor(value: Any, owner: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{owner}: divisor must be an int >= 1, got {value!r}.")
    return value


def _round_up(units: ChannelUnits, divisor: int) -> None:
    """Keep further channels (the first pruned ones) until each unit keeps a multiple of ``divisor``."""
    for unit in units.units:
        kept = unit.activated_channels
        goal = min(unit.num_channels, -(-kept // divisor) * divisor)
        if goal > kept:
            extra = [i for i in range(unit.num_channels) if unit.mask[i] == 0][: goal - kept]
            unit.keep([i for i in range(unit.num_channels) if unit.mask[i] != 0] + extra)


def read_structure(path: str | os.PathLike, owner: str) -> Any:
    """The content of a pruning structure file (.json, else YAML), as written."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(f"{owner}: fix_subnet={str(path)!r} does not exist (relative paths are read from "
                          f"{Path.cwd()}); give the pruning structure as a dict or a .json/.yaml file of it.")
    try:
        return json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"{owner}: {path} is not a readable .json/.yaml file ({exc}).") from exc


def _structure(fix_subnet: Any) -> dict[str, Any]:
    if isinstance(fix_subnet, (str, os.PathLike)):
        fix_subnet = read_structure(fix_subnet, "GroupFisherDeploySubModel")
    if not isinstance(fix_subnet, Mapping):
        raise ConfigError(f"GroupFisherDeploySubModel: fix_subnet must be a dict unit name -> kept ratio or channel "
                          f"count (or such a file), got {type(fix_subnet).__name__}.")
    return dict(fix_subnet)


def _clamped(name: str, choice: Any, width: int) -> Any:
    """``choice``, or ``width`` (with a warning) where it is a channel count above the unit's width, as MMRazor.

    MMRazor's own files ask for more channels than a unit has (DMCP_MBV2_100M.json: 693 of 576) and MMRazor keeps
    the whole unit; anything else (ratios, counts <= 0, non-integers) is left to the unit's own check.
    """
    if isinstance(choice, int) and not isinstance(choice, bool) and choice > width:
        log.warning("Pruning structure asks unit %s for %d channels; it has %d: keeping all %d (as MMRazor does).",
                    name, choice, width, width)
        return width
    return choice


def shrink_to_structure(model: nn.Module, structure: Mapping[str, Any], divisor: int = 1,
                        parse_cfg: Mapping[str, Any] | None = None, dummy_input: Any = None) -> nn.Module:
    """``model`` physically shrunk to ``structure`` (unit name -> kept ratio or channels; first channels kept).

    A channel count above a unit's width keeps the whole unit, with a logged warning (MMRazor clamps silently).
    """
    mutator = ChannelMutator(parse_cfg=parse_cfg)
    mutator.prepare_from_supernet(model, dummy_input)
    units = mutator.prepared
    for name, choice in structure.items():
        unit = units.resolve(name)
        units.choose(unit, unit.count_for(_clamped(unit.name, choice, unit.num_channels)), "sequential")
    _round_up(units, divisor)
    model.kept_channels = units.deploy()
    return model


def mutator_structure(dump: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(unit name -> choice, parse_cfg) of a channel mutator's dump (MMRazor's ``mode='mutator'`` subnet files)."""
    units = dump.get("channel_unit_cfg", {}).get("units") if isinstance(dump.get("channel_unit_cfg"), Mapping) else None
    if not isinstance(units, Mapping) or not all(isinstance(u, Mapping) and "choice" in u for u in units.values()):
        raise ConfigError("A mode='mutator' subnet is a channel mutator's dump: dict(type=..., channel_unit_cfg=dict("
                          "units={unit name: dict(init_args=..., choice=...)})); this one has no such units.")
    parse = dump.get("parse_cfg")
    return {str(k): v["choice"] for k, v in units.items()}, dict(parse) if isinstance(parse, Mapping) else None


@register_module()
def GroupFisherDeploySubModel(architecture: nn.Module | Mapping[str, Any], fix_subnet: Any = None,  # noqa: N802
                              divisor: int = 1, parse_cfg: Mapping[str, Any] | None = None,
                              dummy_input: Any = None, **kwargs: Any) -> nn.Module:
    """``architecture`` shrunk to the pruning structure ``fix_subnet``; the first channels of each unit are kept.

    ``fix_subnet``: per unit (``'backbone.conv1_(0, 32)_32'``), a kept ratio in (0, 1] or a channel count (or a
    .json/.yaml file of it); the pruned checkpoint's weights load afterwards. ``parse_cfg`` / ``dummy_input``:
    how the model is traced (as :class:`ChannelMutator`). Other MMRazor keys are accepted and unused.
    """
    divisor = _divisor(divisor, "GroupFisherDeploySubModel")
    structure = _structure({} if fix_subnet is None else fix_subnet)
    return shrink_to_structure(build_module(architecture, "architecture"), structure, divisor, parse_cfg, dummy_input)


@register_module()
def GroupFisherSubModel(algorithm: PruningAlgorithm | Mapping[str, Any], divisor: int = 1,  # noqa: N802
                        architecture: nn.Module | None = None, **kwargs: Any) -> nn.Module:
    """The static model of a pruning algorithm (built from its config, or the trained one you pass).

    ``architecture`` (slimkit's addition) replaces the algorithm config's ``architecture``, as
    ``build(cfg.model, architecture=net)`` does for the algorithms themselves; the pruning the algorithm holds
    (e.g. after training) is deployed with widths rounded up to ``divisor``.
    """
    divisor = _divisor(divisor, "GroupFisherSubModel")
    if isinstance(algorithm, Mapping):
        spec = dict(algorithm)
        if architecture is not None:
            spec["architecture"] = architecture
        algorithm = build_component(spec)
    if not isinstance(algorithm, PruningAlgorithm):
        raise ConfigError(f"GroupFisherSubModel needs a pruning algorithm (e.g. dict(type='GroupFisherAlgorithm', "
                          f"architecture=..., mutator=...)), got {type(algorithm).__name__}.")
    if algorithm.kept_channels is None:
        _round_up(algorithm.units, divisor)
    return algorithm.deploy()
