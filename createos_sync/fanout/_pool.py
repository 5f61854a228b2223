"""``cs.map(..., reuse=True)``: a pool of open leases, each lent to one item at a time.

An item borrows an idle lease, or a new one when none is idle (never more
than ``concurrency``: no more items run at once), calls ``fn`` on it and
gives it back. So in the steady state an item costs only what ``fn`` sends,
and the pool's creations, watchdogs and destroys are paid once per lease.

Given back, a lease is kept for the next item only if it can serve it as a
fresh one would: its item broke no containment (``CreateosCleanupError``),
its sandbox is still there (no ``SandboxUnavailable``, ``LeaseExpired``
included), ``fn`` neither closed nor paused it, and the processes the item
left running were terminated by the containment rule's steps (none left: no
request). Otherwise it is closed as a ``with`` block would close it, and the
item's outcome is reported as usual. What the item wrote to the sandbox stays
for the next one: that is the point of reuse, and the documented price.

At the end, or when ``cs.map`` stops, the idle leases are closed side by side;
a lease given back after that is closed at once instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .._sandboxes.containment import CleanupTime, confirm_ends
from ..client import Client
from ..errors import (
    CreateosCleanupError,
    SandboxUnavailable,
    add_note,
    attach_cleanup_failure,
    is_cleanup_error,
)
from ..lease import Lease
from ..lease._options import LeaseOptions

ItemFn = Callable[[Lease, Any], Any]  # cs.map's fn, as its items call it (typed in cs.map)


class Pool:
    """The leases of one ``cs.map(..., reuse=True)`` call."""

    def __init__(self, client: Client, options: LeaseOptions) -> None:
        self._client = client
        self._options = options
        self._lock = threading.Lock()
        self._idle: list[Lease] = []
        self._drained = False

    def borrow(self) -> Lease:
        """An idle lease, or a new one (opened here); one closed while idle (its
        ``max_lifetime``) is left out."""
        with self._lock:
            while self._idle:
                lease = self._idle.pop()
                if not lease.closed:
                    return lease
        return Lease(self._client, self._options).open()

    def use(self, lease: Lease, fn: ItemFn, item: Any) -> Any:
        """``fn(lease, item)``, then keep the lease for the next item or close it.

        As in ``with lease:``: a cleanup failure after a success raises, one
        after a failure is attached to that failure as a note.
        """
        try:
            result = fn(lease, item)
        except BaseException as exc:
            if not self._kept(lease, exc):
                lease.__exit__(type(exc), exc, exc.__traceback__)
            raise
        if not self._kept(lease, None):
            lease.close()
        return result

    def drain(self) -> list[Lease]:
        """Keep no lease from now on; the idle ones, for the caller to close."""
        with self._lock:
            self._drained = True
            idle, self._idle = self._idle, []
        return idle

    def _kept(self, lease: Lease, error: BaseException | None) -> bool:
        """Tidy the lease and put it back among the idle ones; False if it must be closed."""
        if error is not None and (
            not isinstance(error, Exception)  # an interrupt, an exit: nothing more runs
            or isinstance(error, SandboxUnavailable)
            or is_cleanup_error(error)
        ):
            return False
        if lease.closed or lease.status != "running" or not _tidied(lease):
            return False
        with self._lock:
            if self._drained:
                return False
            self._idle.append(lease)
        return True


def _tidied(lease: Lease) -> bool:
    """Terminate what the item left running (1 request each); False if an end is unconfirmed.

    A lease whose end stays unconfirmed is poisoned, and closing it destroys
    its sandbox and raises ``CreateosCleanupError``, as at any close.
    """
    box = lease._box  # the lease's own state: the pool is its owner between items
    if box is None:
        return False
    left = box.table.unfinished()
    if left:
        box.table.cut(left)
        budget = CleanupTime.of(box.transport)
        unconfirmed = set(confirm_ends(box.transport, box.sandbox_id, left, budget=budget))
        for process_id in left:
            box.table.settle(process_id, process_id not in unconfirmed)
    return not box.table.poisoned


def close_failures(failures: list[CreateosCleanupError]) -> CreateosCleanupError:
    """The error to raise when closing the pool's idle leases failed after every item."""
    first = failures[0]
    add_note(first, "cs.map: closing the leases of its pool failed after every item finished")
    for other in failures[1:]:
        attach_cleanup_failure(first, other)
    return first
