"""Background machinery in one place: one scheduler thread serves every lease of the process.

What runs while the user is not calling us (ttl renewals, ``max_lifetime``
expiry) is a job of the one ``Scheduler``: its thread starts with the first
job and ends once it has had none for ``IDLE`` seconds (a library leaves no
thread behind when it has nothing to do; the next job starts it again); it
is stopped at interpreter exit, and restarted empty in a forked child. Short jobs
(one request, such as a renewal) run on its thread, one after the other; a
job that may take long (closing a lease) gets a thread of its own, so that
it never delays another lease's renewal.

Time is the clock that keeps counting while the machine sleeps
(``CLOCK_BOOTTIME`` on Linux): a renewal due while a laptop slept runs as
soon as it wakes, and "could the ttl have run out?" is answered with the time
that really passed. The thread never waits more than ``SLICE`` at a time, since
a timed wait of the interpreter does not count the time the machine slept.
"""

from __future__ import annotations

import atexit
import heapq
import itertools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable

log = logging.getLogger("createos_sync.background")

SLICE = 2.0  # seconds: the longest single wait of the scheduler thread
IDLE = 2.0  # seconds without a job after which the scheduler thread ends
STOP_TIMEOUT = 1.0


def _clock_id() -> int | None:
    if sys.platform.startswith("linux"):
        return getattr(time, "CLOCK_BOOTTIME", None)
    if sys.platform == "darwin":
        return getattr(time, "CLOCK_MONOTONIC", None)  # macOS's counts sleep; monotonic() does not
    return None


_CLOCK = _clock_id()


def clock() -> float:
    """Seconds on a clock that never goes back and keeps counting while the machine sleeps."""
    if _CLOCK is not None:
        return time.clock_gettime(_CLOCK)
    return time.monotonic()


class Job:
    """A call scheduled on the scheduler; ``cancel()`` before it runs and it never will."""

    def __init__(self, when: float, action: Callable[[], object], name: str, own_thread: bool):
        self.when = when
        self.action = action
        self.name = name
        self.own_thread = own_thread
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Scheduler:
    """One thread running jobs at their time; ``clock`` is injectable for tests."""

    def __init__(self, clock: Callable[[], float] = clock, slice_seconds: float = SLICE) -> None:
        self._clock = clock
        self._slice = slice_seconds
        self._ready = threading.Condition()
        self._queue: list[tuple[float, int, Job]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def call_later(
        self, delay: float, action: Callable[[], object], *, name: str, own_thread: bool = False
    ) -> Job:
        """Run ``action`` once, ``delay`` seconds from now; ``own_thread`` for long jobs."""
        job = Job(self._clock() + max(0.0, delay), action, name, own_thread)
        with self._ready:
            if self._stopped:
                job.cancel()  # the interpreter is exiting: nothing new starts
                return job
            heapq.heappush(self._queue, (job.when, next(self._order), job))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="createos-background", daemon=True
                )
                self._thread.start()
            self._ready.notify()
        return job

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Run nothing more; wait a little for a job under way."""
        with self._ready:
            self._stopped = True
            self._queue.clear()
            self._ready.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def pending(self) -> list[str]:
        """Names of the jobs still to run (for tests and reprs)."""
        with self._ready:
            return [job.name for _, _, job in sorted(self._queue) if not job.cancelled]

    def _next(self) -> Job | None:
        """The next due job, waiting for it; None (the thread ends) once stopped, or once
        idle for ``IDLE`` seconds: the next job starts a new thread."""
        idle_since: float | None = None
        with self._ready:
            while not self._stopped:
                while self._queue and self._queue[0][2].cancelled:
                    heapq.heappop(self._queue)
                if not any(not job.cancelled for _, _, job in self._queue):
                    self._queue.clear()
                    idle_since = self._clock() if idle_since is None else idle_since
                    if self._clock() - idle_since >= IDLE:
                        break
                    self._ready.wait(min(self._slice, IDLE))
                    continue
                idle_since = None
                if self._queue[0][0] <= self._clock():
                    return heapq.heappop(self._queue)[2]
                self._ready.wait(min(self._queue[0][0] - self._clock(), self._slice))
            self._thread = None
            return None

    def _run(self) -> None:
        while (job := self._next()) is not None:
            if job.own_thread:
                threading.Thread(target=_guarded, args=(job,), name=job.name, daemon=True).start()
            else:
                _guarded(job)


def _guarded(job: Job) -> None:
    if job.cancelled:
        return
    try:
        job.action()
    except Exception:  # a job's failure must not end the thread that serves every lease
        log.exception("background job %s failed", job.name)


_lock = threading.Lock()
_scheduler: Scheduler | None = None


def scheduler() -> Scheduler:
    """The scheduler of this process, made on first use."""
    global _scheduler
    with _lock:
        if _scheduler is None:
            _scheduler = Scheduler()
            atexit.register(_scheduler.stop)
        return _scheduler


def _forget_in_child() -> None:
    # A forked child has no scheduler thread: it starts its own on first use.
    global _scheduler, _lock
    _scheduler = None
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
