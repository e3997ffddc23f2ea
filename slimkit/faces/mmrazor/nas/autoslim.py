"""AutoSlim (Yu & Huang, 2019): a slimmable supernet over a plain CNN's widths, then greedy channel slimming.

``model=dict(type='AutoSlim', architecture=<your CNN>, mutator=dict(type='OneShotChannelMutator',
channel_unit_cfg=dict(default_args=dict(candidate_choices=[...], choice_mode='ratio', divisor=8)),
parse_cfg=dict(demo_input=(1, 3, 224, 224))), distiller=...)`` as in MMRazor's configs. The architecture
becomes a width supernet (:func:`~slimkit.engines.nas.make_searchable`: one width per group of coupled channels,
traced on ``demo_input``, channels sorted by importance), trained with the sandwich rule
(:class:`~slimkit.faces.mmrazor.nas.sandwich.SandwichNAS`). ``AutoSlimGreedySearchLoop``
(:class:`~slimkit.engines.nas.GreedyChannelSearch`) then narrows it under FLOPs targets; :meth:`AutoSlim.export`
gives the plain, physically narrower model of a subnet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from slimkit.core.registry import build_module
from slimkit.engines.nas import ChannelSupernet, NasMutator, export_subnet, make_searchable
from slimkit.errors import ConfigError, check_int
from slimkit.faces.mmrazor.builder import register_module
from slimkit.faces.mmrazor.nas.sandwich import SandwichNAS
from slimkit.training.distill import ConfigurableDistiller

_MUTATOR_KEYS = {"type", "_scope_", "channel_unit_cfg", "parse_cfg"}


def channel_mutator_args(mutator: Mapping[str, Any] | None) -> tuple[list[float], Any, Any]:
    """(width ratios, divisor, demo input shape) from an MMRazor ``OneShotChannelMutator`` config."""
    if mutator is not None and not isinstance(mutator, Mapping):
        raise ConfigError(f"AutoSlim's mutator is read from its config dict (dict(type='OneShotChannelMutator', "
                          f"channel_unit_cfg=..., parse_cfg=...)), got a {type(mutator).__name__}.")
    mutator = dict(mutator or {})
    kind = str(mutator.get("type", "OneShotChannelMutator")).rpartition(".")[2]
    if kind != "OneShotChannelMutator" or set(mutator) - _MUTATOR_KEYS:
        raise ConfigError(f"AutoSlim's mutator must be dict(type='OneShotChannelMutator', channel_unit_cfg=..., "
                          f"parse_cfg=...), got type {kind!r} with keys {sorted(mutator)}.")
    unit = dict(mutator.get("channel_unit_cfg") or {})
    args = dict(unit.get("default_args") or {})
    if str(args.get("choice_mode", "ratio")) != "ratio":
        raise ConfigError(f"AutoSlim: choice_mode={args['choice_mode']!r} is not supported; give candidate_choices "
                          "as ratios of each layer's width (choice_mode='ratio'), e.g. [0.25, 0.5, 0.75, 1.0].")
    ratios = args.get("candidate_choices", (0.25, 0.5, 0.75, 1.0))
    if not isinstance(ratios, (list, tuple)):
        raise ConfigError(f"AutoSlim: candidate_choices must be a list of width ratios, got {ratios!r}.")
    divisor = args.get("divisor", 1)
    demo = (mutator.get("parse_cfg") or {}).get("demo_input")
    return list(ratios), divisor, demo


@register_module()
class AutoSlim(SandwichNAS):
    """AutoSlim: width supernet from ``architecture`` + sandwich-rule training (see the module doc).

    ``input_shape``: the shape of the example input the channels are traced with (default: the mutator's
    ``parse_cfg.demo_input``; one of the two is needed). ``bn_training_mode`` (MMRazor's search configs): keep
    batch norms computing batch statistics in eval mode, so candidates are scored with their own statistics.
    The architecture is converted in place; pass a copy to keep the original.
    """

    def __init__(self, architecture: nn.Module | Mapping[str, Any], mutator: Mapping[str, Any] | None = None,
                 distiller: ConfigurableDistiller | Mapping[str, Any] | None = None, num_random_samples: int = 2,
                 bn_training_mode: bool = False, data_preprocessor: Any = None,
                 input_shape: Sequence[int] | None = None, init_cfg: Mapping[str, Any] | None = None) -> None:
        check_int("AutoSlim: num_random_samples", num_random_samples, 0)  # before the architecture is converted
        model = build_module(architecture, "architecture")
        if isinstance(model, ChannelSupernet):
            supernet = model
        else:
            ratios, divisor, demo = channel_mutator_args(mutator)
            shape = input_shape if input_shape is not None else demo
            if shape is not None and (not isinstance(shape, (list, tuple)) or not shape or any(
                    isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in shape)):
                raise ConfigError(f"AutoSlim: the example input shape must be a list of positive ints such as "
                                  f"(1, 3, 224, 224), got {shape!r}.")
            if shape is None:
                raise ConfigError("AutoSlim traces the architecture's channels on an example input: give "
                                  "mutator.parse_cfg.demo_input=(1, C, H, W) or input_shape=(1, C, H, W).")
            device = next((p.device for p in model.parameters()), torch.device("cpu"))
            supernet = make_searchable(model, torch.zeros(tuple(shape), device=device), ratios, divisor=divisor)
        super().__init__(supernet, NasMutator(), distiller, num_random_samples, bn_training_mode,
                         data_preprocessor, init_cfg)

    def distill_target(self) -> nn.Module:
        """Your model inside the width supernet: recorders name its layers (``head.fc``), as in your config."""
        return self.architecture.model

    def export(self, subnet: Mapping[str, Any] | None = None) -> nn.Module:
        """The plain model of ``subnet`` (default: the active one), narrower layers with the supernet's weights."""
        return export_subnet(self.architecture, subnet).model
