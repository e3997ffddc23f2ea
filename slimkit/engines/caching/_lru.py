"""What the output caches share: an ordered store bounded in entries, its lock and its hit counters."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any


class BoundedLRU:
    """A thread-safe LRU of at most ``bound`` entries counting hits, misses, bypassed calls and evictions."""

    def __init__(self, bound: int) -> None:
        self._bound = bound
        self._entries: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = self.bypassed = self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def hit_rate(self) -> float:
        """Hits over lookups (0.0 before any lookup)."""
        looked_up = self.hits + self.misses
        return self.hits / looked_up if looked_up else 0.0

    def _bypass(self) -> None:
        """Count a call the cache does not answer."""
        with self._lock:
            self.bypassed += 1

    def _put(self, key: Hashable, value: Any) -> None:
        """Store ``value`` as the newest entry; evict the oldest ones past the bound."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self._bound:
                self._entries.popitem(last=False)
                self.evictions += 1
