"""Request counters and latency percentiles for the server's ``/metrics``."""

from __future__ import annotations

import threading
from collections import Counter, deque
from typing import Any


class ServeMetrics:
    """Thread-safe counts of requests by route and status, and the latencies of the last ``window`` requests."""

    def __init__(self, window: int = 10_000) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        self.statuses: Counter[int] = Counter()
        self.inputs = 0
        self._latencies: deque[float] = deque(maxlen=window)

    def record(self, route: str, status: int, seconds: float, inputs: int = 0) -> None:
        """Count one answered request."""
        with self._lock:
            self.requests[route] += 1
            self.statuses[status] += 1
            self.inputs += inputs
            self._latencies.append(seconds)

    def snapshot(self) -> dict[str, Any]:
        """JSON-able counters and latency percentiles (milliseconds) over the window."""
        with self._lock:
            ordered = sorted(self._latencies)
            total = sum(self.requests.values())

            def pct(p: float) -> float | None:
                return round(1000 * ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))], 3) if ordered else None

            return {"requests": total, "requests_by_route": dict(self.requests), "inputs": self.inputs,
                    "responses_by_status": {str(k): v for k, v in sorted(self.statuses.items())},
                    "latency_ms": {"p50": pct(50), "p90": pct(90), "p99": pct(99), "max": pct(100),
                                   "window": len(ordered)}}
