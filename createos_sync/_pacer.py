"""Client-side request pacing, so that a process never meets the service's rate limit.

CreateOS allows 300 requests per minute per caller. Rather than provoke 429
answers and back off, every request first takes a slot from a sliding-window
log shared by every client of this interpreter that talks to the same base
URL with the same limit.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

from ._deadline import Clock, Deadline
from .errors import OperationTimeout

# A little more than the service's minute, so that network jitter between our
# send time and the service's arrival time cannot put 301 requests in its window.
WINDOW_SECONDS = 61.0


class Pacer:
    """At most ``limit`` requests in any ``window`` seconds, across threads."""

    def __init__(
        self,
        limit: int,
        *,
        window: float = WINDOW_SECONDS,
        clock: Clock = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
        self._sleep = sleep
        self._sent: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()

    def acquire(self, deadline: Deadline | None = None, operation: str = "request") -> None:
        """Wait for a slot; raise OperationTimeout if none frees up before the deadline."""
        while True:
            with self._lock:
                now = self._clock()
                while self._sent and self._sent[0] <= now - self.window:
                    self._sent.popleft()
                if len(self._sent) < self.limit:
                    self._sent.append(now)
                    return
                wait = self._sent[0] + self.window - now
            if deadline is not None and wait > deadline.remaining():
                raise OperationTimeout(
                    operation, deadline.seconds, "the request rate limit leaves no slot in time"
                )
            self._sleep(wait)


_shared: dict[tuple[str, int], Pacer] = {}
_shared_lock = threading.Lock()


def shared_pacer(base_url: str, limit: int) -> Pacer:
    """The interpreter-wide pacer for one base URL and limit."""
    with _shared_lock:
        pacer = _shared.get((base_url, limit))
        if pacer is None:
            pacer = _shared[(base_url, limit)] = Pacer(limit)
        return pacer
