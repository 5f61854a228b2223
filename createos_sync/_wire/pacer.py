"""Client-side request pacing, so that a machine never meets the service's rate limit.

CreateOS allows 300 requests per minute per caller IP. Rather than provoke
429 answers and back off, every request first takes a slot from a window:
by default the machine's (``MachinePacer``: a record in the state directory
that every process of this machine shares, see ``budget``); with
``rate_scope="process"`` a sliding-window log shared by every client of this
interpreter that talks to the same base URL with the same limit (``Pacer``).

A wait is never silent: one longer than ``ANNOUNCE_AFTER`` seconds is logged
at INFO on ``createos_sync.budget`` (once per wait, however many threads
wait with it), and ``waiting()`` tells a progress display how long is left.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..config import RateScope, normalize_base_url, state_dir
from ..errors import ConfigError, OperationTimeout
from .budget import BudgetRecord, RecordBusy, prune, record_path
from .deadline import Clock, Deadline

log = logging.getLogger("createos_sync.pacer")
budget_log = logging.getLogger("createos_sync.budget")

# A little more than the service's minute, so that network jitter between our
# send time and the service's arrival time cannot put 301 requests in its window.
WINDOW_SECONDS = 61.0
ANNOUNCE_AFTER = 2.0  # a wait for the budget longer than this is logged at INFO


class Pacer:
    """At most ``limit`` requests in any ``window`` seconds, across threads."""

    def __init__(
        self,
        limit: int,
        *,
        window: float = WINDOW_SECONDS,
        clock: Clock = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        service: str = "the service",
    ) -> None:
        self.limit = limit
        self.window = window
        self.service = service  # the base URL, for the wait's log line
        self._clock = clock
        self._sleep = sleep
        self._sent: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()
        self._announced_until = -math.inf  # the end of the last wait logged

    def waiting(self) -> float:
        """Seconds left of the wait for the budget last logged (0.0: none under way)."""
        return max(0.0, self._announced_until - self._clock())

    def _wait(self, seconds: float, deadline: Deadline | None, operation: str) -> None:
        """Sleep ``seconds`` for a slot, said at INFO when long; raise if past the deadline."""
        if deadline is not None and seconds > deadline.remaining():
            raise OperationTimeout(
                operation, deadline.seconds, "the request rate limit leaves no slot in time"
            )
        if seconds > ANNOUNCE_AFTER:
            now = self._clock()
            with self._lock:  # one line per wait, not one per thread waiting in it
                announce = now >= self._announced_until
                if announce:
                    self._announced_until = now + seconds
            if announce:
                budget_log.info(
                    "waiting %.0f s for the request budget: %d per minute on %s",
                    seconds,
                    self.limit,
                    self.service,
                )
        self._sleep(seconds)

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
            self._wait(wait, deadline, operation)


class MachinePacer(Pacer):
    """At most ``limit`` requests in any ``window`` seconds, across the machine's processes.

    The window is a ``BudgetRecord`` in the state directory. When the record
    cannot be used, this pacer paces its own process with the window it
    inherits from ``Pacer``: for good if the state directory cannot be
    written (one warning), for a while if another process holds the record's
    lock without letting go (found out once per process, one warning: see
    ``budget``). Requests are never blocked for good, nor past their deadline.
    """

    def __init__(
        self,
        limit: int,
        record: BudgetRecord,
        *,
        clock: Clock = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        service: str = "the service",
    ) -> None:
        super().__init__(limit, window=record.window, clock=clock, sleep=sleep, service=service)
        self.record = record
        self._alone_until: float | None = None  # set while pacing this process alone

    def acquire(self, deadline: Deadline | None = None, operation: str = "request") -> None:
        while True:
            wait = self._take(deadline)
            if wait is None:
                super().acquire(deadline, operation)
                return
            if wait <= 0:
                return
            self._wait(wait, deadline, operation)

    def _take(self, deadline: Deadline | None) -> float | None:
        """The record's answer (0.0 admitted, else the wait), or None to pace alone."""
        alone_until = self._alone_until
        if alone_until is not None:
            if self._clock() < alone_until:
                return None
            self._alone_until = None
        # A held lock may take half of what is left, never all: the send needs the rest.
        bound = deadline.remaining() / 2 if deadline is not None else None
        try:
            return self.record.take(self.limit, self._clock, bound=bound)
        except RecordBusy as busy:
            if busy.detected:
                log.warning(
                    "the request budget record %s stayed locked by another process for "
                    "%g s: pacing this process alone until it is free",
                    self.record.path,
                    self.record.patience,
                )
        except OSError as exc:
            log.warning(
                "the machine's request budget cannot be kept in %s (%s): pacing this process alone",
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
    directory = state_dir() if scope == "machine" else None
    path = record_path(directory, base_url, WINDOW_SECONDS) if directory is not None else None
    with _shared_lock:
        key = (scope, base_url, limit, path)
        pacer = _shared.get(key)
        if pacer is None:
            if path is None:
                pacer = Pacer(limit, service=base_url)
            else:
                pacer = MachinePacer(limit, BudgetRecord(path, WINDOW_SECONDS), service=base_url)
            _shared[key] = pacer
        first = directory is not None and directory not in _pruned
        if directory is not None:
            _pruned.add(directory)
    if first and directory is not None:
        prune(directory)  # once per process: the records of services unused for a day
    return pacer


_pruned: set[Path] = set()  # state directories pruned by this process


def forget(base_url: str) -> None:
    """Drop this interpreter's pacers of ``base_url`` and the machine's record of it.

    For a service that is gone for good: a local emulator when it closes
    (its port, hence its URL, is never the same twice). A client still using
    it keeps pacing; its next send starts a fresh record. No request.
    """
    with contextlib.suppress(ConfigError):  # (no client could use one it refuses)
        base_url = normalize_base_url(base_url)  # as the clients' configuration keys it
    with _shared_lock:
        for key in [key for key in _shared if key[1] == base_url]:
            del _shared[key]
    path = record_path(state_dir(), base_url, WINDOW_SECONDS)
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        log.debug("could not remove the request budget record %s: %s", path, exc)
