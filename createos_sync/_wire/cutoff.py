"""Wall-clock deadlines on the wire: a request still running at its deadline is cut.

A socket's read timeout bounds each wait for a byte, not a whole answer: a
server that trickles one byte every half second keeps a read alive for ever,
whatever the timeout. So every request carries a ``Cutoff``: when its
deadline passes, one alarm thread shuts the request's socket down, which
ends the read in progress at once; the transport then reports it as an
answer that did not come before the deadline.

The socket is found through the connection classes of the transport's own
pools (``POOL_CLASSES``): a connection that sends a request is claimed by
the cutoff of the thread sending it, and released when it goes back to its
pool, so that an alarm never cuts a connection serving another request. A
``requests.Session`` given by the caller keeps its own pools: its requests
are bounded by per-read timeouts only.

urllib3 has no public hook for a connection going back to its pool (in 2.x
responses are made by the connection, so a pool's ``ResponseCls`` is no
seam either): the pools override ``_put_conn``, a private method. pyproject
bounds urllib3 below its next minor release, and ``tests/unit/test_cutoff.py``
checks the seam; raising the bound is deliberate, once that test passes.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import urllib3.connection
import urllib3.connectionpool

from .deadline import Deadline

_lock = threading.Lock()  # guards every claim, release and firing
IDLE = 2.0  # seconds without a request in flight after which the alarm thread ends
_local = threading.local()


class Cutoff:
    """The deadline of one request; once it fires, the connection it claimed is cut."""

    def __init__(self, deadline: Deadline) -> None:
        self.fired = False
        self._over = False
        self._conn: _Claimable | None = None
        self.at = time.monotonic() + deadline.remaining()
        self._scheduled = math.isfinite(self.at)
        if self._scheduled:
            _ALARMS.schedule(self)

    @contextlib.contextmanager
    def sending(self) -> Iterator[None]:
        """Connections that send a request from this thread meanwhile are claimed."""
        previous = getattr(_local, "cutoff", None)
        _local.cutoff = self
        try:
            yield
        finally:
            _local.cutoff = previous

    def cancel(self) -> None:
        """The request is over: the alarm must not touch its connection any more."""
        with _lock:
            self._over = True
            self._let_go()
        if self._scheduled:
            _ALARMS.finished(self)

    def fire_now(self) -> None:
        """Cut the claimed connection now, from any thread (a cancelled run)."""
        self._fire()

    def claim(self, conn: Any) -> None:
        """Claim a connection already in use (a stream kept open past its request)."""
        if hasattr(conn, "createos_cutoff"):
            self._claim(conn)

    def _claim(self, conn: _Claimable) -> None:
        with _lock:
            if self._over:
                return
            conn.createos_cutoff = self
            self._conn = conn
            if self.fired:
                _shut(conn)

    def _fire(self) -> None:
        with _lock:
            if self._over:
                return
            self.fired = True
            if self._conn is not None and self._conn.createos_cutoff is self:
                _shut(self._conn)

    def _let_go(self) -> None:
        if self._conn is not None and self._conn.createos_cutoff is self:
            self._conn.createos_cutoff = None
        self._conn = None

    def __enter__(self) -> Cutoff:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cancel()


def _shut(conn: _Claimable) -> None:
    sock = getattr(conn, "sock", None)
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            # The plain socket's shutdown, even under TLS: it wakes the blocked read
            # without touching the TLS object that the reading thread is using.
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Alarms:
    """One daemon thread firing cutoffs at their time: started when a request needs it,
    ended once no request has been in flight for ``IDLE`` to twice ``IDLE`` seconds (a
    library leaves no thread behind when it has nothing to do).

    The thread never sleeps longer than ``IDLE``, so that it finds out by itself that
    no request is in flight; it is woken only for a cutoff due before it would wake
    anyway. Most requests end long before their deadline: then neither their start
    nor their end wakes it (each wake-up costs a switch of threads, and the GIL).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Cutoff]] = []
        self._live: set[Cutoff] = set()  # scheduled, neither fired nor over
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._wakes_at = -math.inf  # when the waiting thread wakes by itself (-inf: awake)

    def schedule(self, cutoff: Cutoff) -> None:
        with self._cond:
            self._drop_finished()
            heapq.heappush(self._heap, (cutoff.at, next(self._order), cutoff))
            self._live.add(cutoff)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="createos-cutoff", daemon=True
                )
                self._thread.start()
            elif cutoff.at < self._wakes_at:
                self._cond.notify()  # due before the thread would wake
            # else the thread's sleep ends earlier anyway: no wake-up per request

    def finished(self, cutoff: Cutoff) -> None:
        with self._cond:
            self._live.discard(cutoff)  # the thread finds it out within IDLE

    def _drop_finished(self) -> None:
        # Most requests end long before their deadline: forget them now and then.
        if len(self._heap) > 1024:
            self._heap = [entry for entry in self._heap if not entry[2]._over]
            heapq.heapify(self._heap)

    def _run(self) -> None:
        while (due := self._next()) is not None:
            due._fire()

    def _next(self) -> Cutoff | None:
        """The next cutoff due, waiting for it; None (the thread ends) once idle."""
        with self._cond:
            try:
                while True:
                    if not self._live:
                        self._heap.clear()
                        if not self._sleep(IDLE) and not self._live:
                            self._thread = None
                            return None
                        continue
                    while self._heap and self._heap[0][2]._over:
                        heapq.heappop(self._heap)
                    if not self._heap:  # the last one is over, and about to say so
                        self._sleep(IDLE)
                        continue
                    wait = self._heap[0][0] - time.monotonic()
                    if wait <= 0:
                        due = heapq.heappop(self._heap)[2]
                        self._live.discard(due)
                        return due
                    self._sleep(min(wait, IDLE))
            finally:
                self._wakes_at = -math.inf

    def _sleep(self, seconds: float) -> bool:
        """Wait (the lock held) at most ``seconds``; False if nobody woke the thread."""
        self._wakes_at = time.monotonic() + seconds
        return self._cond.wait(seconds)

    def reset_after_fork(self) -> None:
        self._cond = threading.Condition()
        self._heap = []
        self._live = set()
        self._thread = None
        self._wakes_at = -math.inf


_ALARMS = _Alarms()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_ALARMS.reset_after_fork)


class _Claimable:
    """Mixed into a connection class: the cutoff of the sending thread claims it."""

    createos_cutoff: Cutoff | None = None

    def request(self, *args: Any, **kwargs: Any) -> None:
        cutoff: Cutoff | None = getattr(_local, "cutoff", None)
        if cutoff is not None:
            cutoff._claim(self)
        super().request(*args, **kwargs)  # type: ignore[misc]


class _HTTPConnection(_Claimable, urllib3.connection.HTTPConnection):
    pass


class _HTTPSConnection(_Claimable, urllib3.connection.HTTPSConnection):
    pass


def _release(conn: Any) -> None:
    with _lock:
        if isinstance(conn, _Claimable):
            conn.createos_cutoff = None


class _HTTPPool(urllib3.connectionpool.HTTPConnectionPool):
    ConnectionCls = _HTTPConnection

    def _put_conn(self, conn: Any) -> None:
        _release(conn)
        super()._put_conn(conn)


class _HTTPSPool(urllib3.connectionpool.HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection

    def _put_conn(self, conn: Any) -> None:
        _release(conn)
        super()._put_conn(conn)


POOL_CLASSES: dict[str, type[urllib3.connectionpool.HTTPConnectionPool]] = {
    "http": _HTTPPool,
    "https": _HTTPSPool,
}
