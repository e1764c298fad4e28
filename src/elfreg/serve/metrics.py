"""Per-request accounting of ``elfreg serve``: one log line per request (path, status, latency, rows, NFE) and the
running totals ``GET /metrics`` returns."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass, field

log = logging.getLogger("elfreg.serve")


@dataclass
class RequestStats:
    """What requests have cost since the server started."""

    requests: int = 0
    rows: int = 0
    nfe: int = 0                 # network calls spent, summed over the rows answered
    seconds: float = 0.0         # latency, summed
    statuses: Counter = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, method: str, path: str, status: int, seconds: float, rows: int = 0, nfe: int = 0,
               note: str = "") -> None:
        """Count one finished request and log its line."""
        with self._lock:
            self.requests += 1
            self.rows += rows
            self.nfe += nfe
            self.seconds += seconds
            self.statuses[status] += 1
        log.info("%s %s %d %.0f ms rows=%d nfe=%d%s", method, path, status, seconds * 1000, rows, nfe,
                 f" ({note})" if note else "")

    def snapshot(self) -> dict:
        with self._lock:
            return {"requests": self.requests, "rows": self.rows, "nfe_spent": self.nfe,
                    "latency_seconds_total": round(self.seconds, 6),
                    "responses": {str(k): v for k, v in sorted(self.statuses.items())}}
