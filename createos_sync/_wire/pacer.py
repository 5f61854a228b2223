"""Client-side request pacing, so that a machine never meets the service's rate limit.

CreateOS allows 300 requests per minute per caller IP. Rather than provoke
429 answers and back off, every request first takes a slot from a window:
by default the machine's (``MachinePacer``: a record in the state directory
that every process of this machine shares, see ``_budget``); with
``rate_scope="process"`` a sliding-window log shared by every client of this
interpreter that talks to the same base URL with the same limit (``Pacer``).
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..config import RateScope, state_dir
from ..errors import OperationTimeout
from .budget import BudgetRecord, RecordBusy, record_path
from .deadline import Clock, Deadline

log = logging.getLogger("createos_sync.pacer")

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


class MachinePacer(Pacer):
    """At most ``limit`` requests in any ``window`` seconds, across the machine's processes.

    The window is a ``BudgetRecord`` in the state directory. When the record
    cannot be used, this pacer paces its own process with the window it
    inherits from ``Pacer``: for good if the state directory cannot be
    written (one warning), for one window if another process holds the
    record's lock without letting go. Requests are never blocked for good.
    """

    def __init__(
        self,
        limit: int,
        record: BudgetRecord,
        *,
        clock: Clock = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(limit, window=record.window, clock=clock, sleep=sleep)
        self.record = record
        self._alone_until: float | None = None  # set while pacing this process alone

    def acquire(self, deadline: Deadline | None = None, operation: str = "request") -> None:
        while True:
            wait = self._take()
            if wait is None:
                super().acquire(deadline, operation)
                return
            if wait <= 0:
                return
            if deadline is not None and wait > deadline.remaining():
                raise OperationTimeout(
                    operation, deadline.seconds, "the request rate limit leaves no slot in time"
                )
            self._sleep(wait)

    def _take(self) -> float | None:
        """The record's answer (0.0 admitted, else the wait), or None to pace alone."""
        alone_until = self._alone_until
        if alone_until is not None:
            if self._clock() < alone_until:
                return None
            self._alone_until = None
        try:
            return self.record.take(self.limit, self._clock)
        except RecordBusy:
            log.warning(
                "the request budget record %s stayed locked by another process: "
                "pacing this process alone for %g s",
                self.record.path,
                self.window,
            )
            self._alone_until = self._clock() + self.window
        except OSError as exc:
            log.warning(
                "the machine's request budget cannot be kept in %s (%s): "
                "pacing this process alone",
                self.record.path.parent,
                exc,
            )
            self._alone_until = math.inf
        return None


_shared: dict[tuple[str, str, int, Path | None], Pacer] = {}
_shared_lock = threading.Lock()


def shared_pacer(base_url: str, limit: int, scope: RateScope = "machine") -> Pacer:
    """The pacer of every client with this base URL, limit and scope in this interpreter.

    A machine-scope pacer is keyed by its record too, so that a change of
    ``CREATEOS_SYNC_STATE_DIR`` takes effect for clients made afterwards.
    """
    path = record_path(state_dir(), base_url, WINDOW_SECONDS) if scope == "machine" else None
    with _shared_lock:
        key = (scope, base_url, limit, path)
        pacer = _shared.get(key)
        if pacer is None:
            if path is None:
                pacer = Pacer(limit)
            else:
                pacer = MachinePacer(limit, BudgetRecord(path, WINDOW_SECONDS))
            _shared[key] = pacer
        return pacer
