"""BigNAS (Yu et al., 2020): one-stage supernet training with the sandwich rule and inplace distillation.

MMRazor's ``BigNAS`` (and its once-for-all-style configs, ``model=dict(type='BigNAS', architecture=...,
mutator=dict(type='NasMutator'), distiller=...)``) on any slimkit supernet: kernel choices
(:class:`~slimkit.engines.nas.OneShotMutableOP`), widths (:class:`~slimkit.engines.nas.MutableChannels`) and
depths (:class:`~slimkit.engines.nas.MutableSequential`). After training, subnets are searched with
:class:`~slimkit.engines.nas.EvolutionSearchLoop` and exported with :func:`~slimkit.engines.nas.export_subnet`
(physically smaller layers) or ``sub_model``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from slimkit.engines.nas.export import export_subnet
from slimkit.engines.nas.mutator import NasMutator
from slimkit.errors import ConfigError, check_number
from slimkit.faces.mmrazor.builder import register_module
from slimkit.faces.mmrazor.nas.sandwich import SandwichNAS
from slimkit.training.distill import ConfigurableDistiller


@register_module()
class BigNAS(SandwichNAS):
    """Sandwich-rule supernet training (see :class:`~slimkit.faces.mmrazor.nas.sandwich.SandwichNAS`).

    ``drop_path_rate``: the stochastic-depth rate given to every block that has a ``drop_path_rate`` attribute
    (e.g. ``MBBlock``) while the largest subnet trains -- 0 for the smaller ones, as in BigNAS, where only the
    largest child is regularised. ``backbone_dropout_stages``: which stages get it (1-based, the supernet's
    ``layer<i>`` modules wherever they sit); blocks outside ``layer<i>`` modules are not dropped when it is set.
    ``mutators``: the same as ``mutator`` (MMRazor's once-for-all config spells it so).
    """

    def __init__(self, architecture: nn.Module | Mapping[str, Any],
                 mutator: NasMutator | Mapping[str, Any] | None = None,
                 distiller: ConfigurableDistiller | Mapping[str, Any] | None = None,
                 data_preprocessor: Any = None, num_random_samples: int = 2, drop_path_rate: float = 0.2,
                 backbone_dropout_stages: Sequence[int] = (6, 7), norm_training: bool = False,
                 init_cfg: Mapping[str, Any] | None = None,
                 mutators: NasMutator | Mapping[str, Any] | None = None) -> None:
        if mutator is not None and mutators is not None:
            raise ConfigError("BigNAS: give mutator or mutators (the same thing), not both.")
        mutator = mutators if mutator is None else mutator
        check_number("BigNAS: drop_path_rate", drop_path_rate, 0, 1, open_high=True)
        stages_ok = isinstance(backbone_dropout_stages, (list, tuple)) and all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 1 for i in backbone_dropout_stages)
        if backbone_dropout_stages is not None and not stages_ok:
            raise ConfigError(f"BigNAS: backbone_dropout_stages must be a list of stage numbers (1-based), got "
                              f"{backbone_dropout_stages!r}.")
        super().__init__(architecture, mutator, distiller, num_random_samples, norm_training, data_preprocessor,
                         init_cfg)
        self.drop_path_rate = float(drop_path_rate)
        stages = {f"layer{int(i)}" for i in (backbone_dropout_stages or ())}
        self.drop_blocks = [m for name, m in self.architecture.named_modules() if hasattr(m, "drop_path_rate")
                            and (not stages or stages.intersection(name.split(".")))]

    def export(self, subnet: Mapping[str, Any] | None = None) -> nn.Module:
        """The plain architecture of ``subnet`` (default: the active one): narrower layers, chosen kernels."""
        return export_subnet(self.architecture, subnet)

    def before_subnet(self, kind: str) -> None:
        """Drop path on (``drop_path_rate``) for the largest subnet, off for the others."""
        for block in self.drop_blocks:
            block.drop_path_rate = self.drop_path_rate if kind == "max" else 0.0
