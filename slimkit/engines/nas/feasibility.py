"""Whether a search's ``constraints_range`` can be met, and the error that says why not (mixed into the loop)."""

from __future__ import annotations

import json

from torch import nn

from slimkit.engines.nas.constraints import Ranges, cost_bounds, in_units, reachable
from slimkit.engines.nas.mutator import NasMutator, Subnet
from slimkit.errors import ConfigError


class FeasibilityMixin:
    """Feasibility checks of :class:`~slimkit.engines.nas.EvolutionSearchLoop` (its ranges, units, costs)."""

    ranges: Ranges
    units: str
    supernet: nn.Module
    mutator: NasMutator
    example_inputs: object

    def cost(self, subnet: Subnet) -> dict[str, float]:  # implemented by the loop
        """The constrained metrics of ``subnet``."""
        raise NotImplementedError

    def _range_text(self, key: str) -> str:
        low, high = self.ranges[key]
        return f"{key} must lie in [{in_units(key, low, self.units)}, {in_units(key, high, self.units)}]"

    def _hint(self) -> str:
        if self.units == "slimkit" and any(k in self.ranges for k in ("flops", "macs", "params")):
            return (" (units='slimkit' reads flops as 2 x MACs and params as counts; MMRazor's configs mean "
                    "millions: pass units='mmrazor')")
        return ""

    def check_feasible(self) -> None:
        """Raise at once when no subnet can meet a range (exact for one-shot op search spaces, see cost_bounds)."""
        bounds = cost_bounds(self.supernet, self.mutator, self.ranges, self.example_inputs)
        parts = [f"{self._range_text(k)} but every subnet has {k} in [{in_units(k, lo, self.units)}, "
                 f"{in_units(k, hi, self.units)}]" for k, (lo, hi) in bounds.items()
                 if hi < self.ranges[k][0] or lo > self.ranges[k][1]]
        if parts:
            raise ConfigError(f"No subnet can meet constraints_range: {'; '.join(parts)}{self._hint()}. Widen "
                              "constraints_range.")

    def _no_subnet_error(self, tried: list[Subnet], final: bool = True) -> ConfigError | None:
        parts, unreachable = [], False
        for key, (low, high) in self.ranges.items():
            def metric(s: Subnet, key: str = key) -> float:
                return self.cost(s)[key]
            lo, lo_net = reachable(self.mutator, min(tried, key=metric), metric, lowest=True)
            text = (f"{self._range_text(key)} but the smallest reachable {key} is {in_units(key, lo, self.units)} "
                    f"(subnet {json.dumps(lo_net)})")
            unreachable |= lo > high
            if low > 0:  # a lower bound may be out of reach too
                hi, _ = reachable(self.mutator, max(tried, key=metric), metric, lowest=False)
                text += f" and the largest {in_units(key, hi, self.units)}"
                unreachable |= hi < low
            parts.append(text)
        if not final and not unreachable:
            return None
        return ConfigError(f"No subnet met constraints_range after {len(tried)} sampling attempts: "
                           f"{'; '.join(parts)}{self._hint()}. Widen constraints_range (e.g. raise the upper bound to "
                           "at least the smallest reachable value) or, if the range is reachable, raise "
                           "max_sample_attempts.")

