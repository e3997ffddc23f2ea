"""The one union-find of the compression layer (channel classes in the speedup graph, layer groups in pruning)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = ["UnionFind"]


class UnionFind:
    """Union-find over non-negative integer keys with path halving; the smaller root wins a union.

    Keys are allocated in blocks with :meth:`allocate` (the speedup graph's channel ids) or on first use by
    :meth:`find` / :meth:`union` (any small integer: channel-class roots, layer indices).
    """

    def __init__(self) -> None:
        self.parent: list[int] = []

    def __len__(self) -> int:
        """Number of keys known so far (``0 .. len - 1``)."""
        return len(self.parent)

    def allocate(self, n: int) -> np.ndarray:
        """Allocate ``n`` fresh keys, each its own class, and return them."""
        start = len(self.parent)
        self.parent.extend(range(start, start + n))
        return np.arange(start, start + n, dtype=np.int64)

    def find(self, x: int) -> int:
        """Return the representative of ``x`` (a key never seen before becomes its own class)."""
        parent = self.parent
        if not 0 <= x < len(parent):
            if x < 0:
                raise ValueError(f"UnionFind keys are non-negative integers, got {x}.")
            parent.extend(range(len(parent), x + 1))
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        """Merge the classes of ``a`` and ``b``."""
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def union_all(self, items: Iterable[int]) -> None:
        """Merge the classes of every key in ``items``."""
        keys = [int(i) for i in items]
        for other in keys[1:]:
            self.union(keys[0], other)

    def union_arrays(self, a: np.ndarray, b: np.ndarray) -> None:
        """Merge keys pairwise where both are tracked (>= 0)."""
        both = (a >= 0) & (b >= 0) & (a != b)
        if both.any():
            pairs = np.unique(np.stack([a[both], b[both]], axis=1), axis=0)
            for x, y in pairs.tolist():
                self.union(x, y)

    def roots(self) -> np.ndarray:
        """Representative of every key, as an array indexed by key."""
        return np.array([self.find(i) for i in range(len(self.parent))], dtype=np.int64)
