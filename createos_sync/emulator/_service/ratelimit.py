"""Per-client request limit over a sliding 60-second window, as the service applies it."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable

WINDOW = 60.0


class RateLimiter:
    """Admits at most ``per_minute`` requests per client address in any 60 s window."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        if per_minute < 1:
            raise ValueError("rate_limit must be at least 1 (or None to disable it)")
        self._limit = per_minute
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[str, deque[float]] = {}

    def admit(self, client: str) -> int | None:
        """None if admitted (and counted), else the seconds to wait (Retry-After)."""
        now = self._clock()
        with self._lock:
            times = self._seen.setdefault(client, deque())
            while times and times[0] <= now - WINDOW:
                times.popleft()
            if len(times) >= self._limit:
                return max(1, math.ceil(times[0] + WINDOW - now))
            times.append(now)
            return None
