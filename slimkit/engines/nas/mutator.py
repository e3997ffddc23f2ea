"""NasMutator: every mutable of a supernet by name; sample, set and report subnets (MMRazor's ``NasMutator``).

A *subnet* is one choice per mutable. It is written ``{name: choice}`` or, as MMRazor's ``fix_subnet``
description, ``{name: {"chosen": choice}}`` (both are accepted everywhere); names are the mutables' module
paths in the supernet (a width shared by several layers is named where it is first registered).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from slimkit.core.registry import register_component
from slimkit.engines.nas.mutables import BaseMutable
from slimkit.errors import ConfigError, closest

Subnet = dict[str, Any]


def plain_choices(subnet: Mapping[str, Any]) -> Subnet:
    """``{name: choice}`` from either ``{name: choice}`` or ``{name: {"chosen": choice}}``."""
    if not isinstance(subnet, Mapping):
        raise ConfigError(f"A subnet is a mapping name -> choice (or name -> {{'chosen': choice}}), got "
                          f"{type(subnet).__name__}.")
    out = {}
    for name, value in subnet.items():
        if isinstance(value, Mapping):
            if "chosen" not in value:
                raise ConfigError(f"Subnet entry {name!r} is a mapping without 'chosen': {dict(value)!r}; write "
                                  f"{{{name!r}: {{'chosen': <choice>}}}}.")
            value = value["chosen"]
        out[str(name)] = value
    return out


def unwrap(model: nn.Module) -> nn.Module:
    """The supernet itself: an algorithm wrapper's ``architecture`` (razor's ``SPOS``), else ``model``."""
    inner = getattr(model, "architecture", None)
    return inner if isinstance(inner, nn.Module) else model


def subnet_key(subnet: Mapping[str, Any]) -> str:
    """A canonical string for a subnet (sorted JSON of its plain choices): equal subnets, equal keys."""
    return json.dumps(plain_choices(subnet), sort_keys=True)


class NasMutator:
    """Finds the mutables of a supernet (:meth:`prepare_from_supernet`) and samples / sets / reports subnets."""

    def __init__(self, supernet: nn.Module | None = None) -> None:
        self.mutables: dict[str, BaseMutable] = {}
        if supernet is not None:
            self.prepare_from_supernet(supernet)

    def prepare_from_supernet(self, supernet: nn.Module) -> None:
        """Collect every :class:`BaseMutable` of ``supernet`` by module path (each shared one once)."""
        if not isinstance(supernet, nn.Module):
            raise ConfigError(f"NasMutator needs the supernet as an nn.Module, got {type(supernet).__name__}.")
        self.mutables = {name: m for name, m in supernet.named_modules() if isinstance(m, BaseMutable)}
        if not self.mutables:
            raise ConfigError(f"{type(supernet).__name__} has no mutables: build the supernet from OneShotMutableOP, "
                              "MutableChannels (with Dynamic* layers) and MutableSequential.")

    def _require(self) -> None:
        if not self.mutables:
            raise ConfigError("This NasMutator has no supernet yet; call prepare_from_supernet(model) first.")

    def search_space(self) -> dict[str, list[Any]]:
        """``{name: [choices]}`` of every mutable."""
        self._require()
        return {name: m.choices for name, m in self.mutables.items()}

    def num_subnets(self) -> int:
        """How many subnets the search space holds (the product of the choice counts)."""
        return math.prod(len(choices) for choices in self.search_space().values())

    def sample_choices(self, rng: random.Random | None = None) -> Subnet:
        """A uniformly random subnet ``{name: choice}``.

        Draws from ``rng`` when given, else from torch's global RNG (seeded by :func:`slimkit.training.fit`'s ``seed``).
        """
        self._require()
        out = {}
        for name, m in self.mutables.items():
            n = len(m.choices)
            index = rng.randrange(n) if rng is not None else int(torch.randint(n, ()).item())
            out[name] = m.choices[index]
        return out

    def max_choices(self) -> Subnet:
        """The largest subnet: every mutable's last choice (widest width, deepest depth, last-listed op)."""
        self._require()
        return {name: m.choices[-1] for name, m in self.mutables.items()}

    def min_choices(self) -> Subnet:
        """The smallest subnet: every mutable's first choice (narrowest width, shallowest depth, first op)."""
        self._require()
        return {name: m.choices[0] for name, m in self.mutables.items()}

    def set_choices(self, subnet: Mapping[str, Any], strict: bool = True) -> None:
        """Make ``subnet`` the active path. ``strict``: every mutable must be named (else the missing ones).

        A name may also be an ``alias`` several mutables carry (MMRazor's subnet files): it sets all of them.
        Mutables inside a part the subnet leaves out (an unchosen candidate, an edge a route drops) need no choice.
        Unknown names list the closest mutable names; an invalid choice lists the valid ones. Nothing changes
        unless every entry is valid.
        """
        self._require()
        choices = self._expand_aliases(plain_choices(subnet))
        for name, choice in choices.items():
            if name not in self.mutables:
                raise ConfigError(f"The supernet has no mutable {name!r}.{closest(name, self.mutables)} Its mutables: "
                                  f"{', '.join(self.mutables)}.")
            choice = choices[name] = self.mutables[name].canonical_choice(choice)
            if choice not in self.mutables[name].choices:
                valid = ", ".join(repr(c) for c in self.mutables[name].choices)
                hint = closest(str(choice), [str(c) for c in self.mutables[name].choices])
                raise ConfigError(f"{choice!r} is not a choice of mutable {name!r}.{hint} Valid choices: {valid}.")
        unused = [f"{name}.{p}" for name, choice in choices.items() for p in self.mutables[name].unused_paths(choice)]
        missing = [n for n in self.mutables if n not in choices  # mutables inside a part left out need no choice
                   and not any(n == u or n.startswith(u + ".") for u in unused)]
        if strict and missing:
            raise ConfigError(f"The subnet does not set {', '.join(repr(n) for n in missing)}; give a choice for every "
                              "mutable (see mutator.search_space()) or pass strict=False.")
        for name, choice in choices.items():
            self.mutables[name].current_choice = choice

    def _expand_aliases(self, choices: Subnet) -> Subnet:
        """Entries named by an ``alias`` (MMRazor's subnet files) set every mutable carrying that alias."""
        aliases: dict[str, list[str]] = {}
        for path, m in self.mutables.items():
            alias = getattr(m, "alias", None)
            if alias is not None:
                aliases.setdefault(alias, []).append(path)
        out: Subnet = {}
        for name, choice in choices.items():
            for path in [name] if name in self.mutables or name not in aliases else aliases[name]:
                out[path] = choice
        return out

    def current_choices(self) -> Subnet:
        """The active subnet ``{name: choice}``."""
        self._require()
        return {name: m.current_choice for name, m in self.mutables.items()}

    def fix_subnet(self, subnet: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
        """The description ``{name: {"chosen": choice}}`` of ``subnet`` (default: the active one)."""
        choices = self.current_choices() if subnet is None else plain_choices(subnet)
        return {name: {"chosen": choice} for name, choice in choices.items()}

    def mutate(self, subnet: Mapping[str, Any], prob: float, rng: random.Random) -> Subnet:
        """A copy of ``subnet`` where each choice is resampled uniformly with probability ``prob``."""
        fresh, subnet = self.sample_choices(rng), plain_choices(subnet)
        return {n: fresh[n] if rng.random() < prob else subnet[n] for n in self.mutables}  # the mutator's order

    def crossover(self, a: Mapping[str, Any], b: Mapping[str, Any], prob: float, rng: random.Random) -> Subnet:
        """A child taking each choice from ``b`` with probability ``prob``, else from ``a``."""
        a, b = plain_choices(a), plain_choices(b)
        return {n: b[n] if rng.random() < prob else a[n] for n in self.mutables}  # the mutator's order


register_component(NasMutator, "mutator")
