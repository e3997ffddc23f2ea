"""DiffChoiceRoute: which inputs a DARTS cell node keeps (MMRazor's ``DiffChoiceRoute``).

A DARTS cell node sums one edge per earlier tensor of the cell (the two cell inputs and the nodes before it); each
edge is usually a :class:`~slimkit.engines.nas.DiffMutableOP` over the candidate ops. During the search the node's
output is ``sum_i softmax(alpha)_i * edge_i(x_i)``, ``alpha`` being the route's own architecture logits (one per
edge, stepped by the DARTS algorithm beside the ops'). The derived cell keeps the ``num_chosen`` edges with the
largest alpha (two in the DARTS paper): the route's choice is that tuple of edge names, and :meth:`export` is a
:class:`ChosenEdges` holding those edges only (the others, and their weights, are gone: physically smaller).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from functools import reduce
from operator import add
from typing import Any

import torch
from torch import nn

from slimkit.core.registry import build_module, register_component
from slimkit.engines.nas.diff_mutable import ArchLogits
from slimkit.engines.nas.mutables import BaseMutable
from slimkit.errors import ConfigError


class ChosenEdges(nn.Module):
    """The exported node: ``sum(edge(inputs[index]))`` over the kept edges (``index``: each one's input position)."""

    def __init__(self, edges: Mapping[str, nn.Module], index: Sequence[int]) -> None:
        super().__init__()
        self.edges = nn.ModuleDict(dict(edges))
        self.index = [int(i) for i in index]

    def forward(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        """The sum of the kept edges applied to their inputs."""
        return reduce(add, [edge(inputs[i]) for i, edge in zip(self.index, self.edges.values(), strict=True)])

    def extra_repr(self) -> str:
        """Which inputs the kept edges read."""
        return f"inputs={self.index}"


class DiffChoiceRoute(ArchLogits, BaseMutable):
    """A node's input edges mixed by ``softmax(alpha)``; the choice is the tuple of ``num_chosen`` kept edges.

    ``edges``: a mapping edge name -> module or config (an ``nn.ModuleDict`` too), in input order: edge ``i``
    reads ``inputs[i]``. ``with_arch_param`` (MMRazor's): mix by ``softmax(alpha)``; ``False`` sums every edge
    unweighted. ``fixed``: run the current choice only. ``alias``: a name routes share (see
    :class:`~slimkit.engines.nas.OneShotMutableOP`). A choice may be given as a list in any order (MMRazor's
    subnet files list the kept edges by weight): it is stored as the tuple in edge order.
    """

    mixed = "edges"

    def __init__(self, edges: Mapping[str, nn.Module | Mapping[str, Any]], num_chosen: int = 2,
                 with_arch_param: bool = True, fixed: bool = False, alias: str | None = None,
                 init_choice: Sequence[str] | None = None) -> None:
        if not isinstance(edges, Mapping) or not edges:
            raise ConfigError(f"DiffChoiceRoute needs a non-empty mapping edge name -> module, got {edges!r}.")
        names = [str(k) for k in edges]
        if isinstance(num_chosen, bool) or not isinstance(num_chosen, int) or not 1 <= num_chosen <= len(names):
            raise ConfigError(f"DiffChoiceRoute num_chosen must be an int in 1..{len(names)} (it has {len(names)} "
                              f"edges: {names}), got {num_chosen!r}.")
        if alias is not None and not isinstance(alias, str):
            raise ConfigError(f"DiffChoiceRoute alias must be a string, got {alias!r}.")
        self._edge_names = names
        super().__init__(list(itertools.combinations(names, num_chosen)), init_choice)
        self.edges = nn.ModuleDict({k: build_module(v, f"edge {k!r}") for k, v in edges.items()})
        self.num_chosen, self.with_arch_param, self.fixed, self.alias = num_chosen, bool(with_arch_param), \
            bool(fixed), alias
        self.init_arch_param(len(names))

    def canonical_choice(self, choice: Any) -> Any:
        """A list or tuple of edge names, in any order, as the tuple in edge order."""
        if isinstance(choice, (list, tuple)) and all(isinstance(c, str) for c in choice) \
                and set(choice) <= set(self._edge_names):
            return tuple(n for n in self._edge_names if n in choice)
        return choice

    def unused_paths(self, choice: Any) -> list[str]:
        """The edges not kept."""
        return [f"edges.{e}" for e in self._edge_names if e not in choice]

    def forward(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        """The weighted sum of every edge on its input (the kept edges' plain sum when ``fixed``)."""
        if not isinstance(inputs, Sequence) or len(inputs) != len(self._edge_names):
            got = len(inputs) if isinstance(inputs, Sequence) else type(inputs).__name__
            raise ConfigError(f"DiffChoiceRoute has {len(self._edge_names)} edges {self._edge_names} and needs as "
                              f"many inputs (a list, one per edge), got {got}.")
        if self.fixed:
            kept = self.current_choice
            return reduce(add, [self.edges[n](x) for n, x in zip(self._edge_names, inputs, strict=True) if n in kept])
        return self.mix(((n, self.edges[n](x)) for n, x in zip(self._edge_names, inputs, strict=True)),
                        self.weights() if self.with_arch_param else None)

    def argmax_choice(self) -> tuple[str, ...]:
        """The ``num_chosen`` edges with the largest architecture logits (in edge order)."""
        top = torch.topk(self.arch_param.detach(), self.num_chosen).indices.tolist()
        return tuple(n for i, n in enumerate(self._edge_names) if i in top)

    def export(self) -> ChosenEdges:
        """A :class:`ChosenEdges` of the current choice's edges (each still a mutable until exported in turn)."""
        kept = self.current_choice
        return ChosenEdges({n: self.edges[n] for n in kept}, [self._edge_names.index(n) for n in kept])

    def extra_repr(self) -> str:
        """The edge weights, how many are kept and whether the route is fixed."""
        probs = ", ".join(f"{c}={p:.3f}" for c, p in zip(self._edge_names, self.weights().tolist(), strict=True))
        return f"{probs}, num_chosen={self.num_chosen}, fixed={self.fixed}"


register_component(DiffChoiceRoute, "mutable")
