"""The open leases of this interpreter, and the exit hook that closes the forgotten ones.

A script or notebook kernel that ends without closing a lease would leave a
running (and billed) sandbox behind. The hook installed with the first
lease closes every lease still open at interpreter exit, by the same rules
as ``close()``, each with a fresh HTTP session (the old one may have been
in use by a thread that the exit interrupted).
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._core import LeaseCore as Lease

log = logging.getLogger("createos_sync.lease")

_open: dict[int, Lease] = {}
_lock = threading.Lock()
_hook_installed = False
_watchers: list[Callable[[Lease], None]] = []


def add(lease: Lease) -> None:
    global _hook_installed
    with _lock:
        _open[id(lease)] = lease
        if not _hook_installed:
            atexit.register(_close_at_exit)
            _hook_installed = True
        watchers = list(_watchers)
    for watcher in watchers:
        watcher(lease)


def watch(watcher: Callable[[Lease], None]) -> Callable[[], None]:
    """Call ``watcher(lease)`` for each lease opened from now on; returns what stops it.

    The pytest plugin's leak check uses it: it must know the leases a test
    session opened, including those closed since (their sandboxes may live on).
    """
    with _lock:
        _watchers.append(watcher)

    def stop() -> None:
        with _lock:
            if watcher in _watchers:
                _watchers.remove(watcher)

    return stop


def discard(lease: Lease) -> None:
    with _lock:
        _open.pop(id(lease), None)


def open_leases() -> list[Lease]:
    """The leases of this interpreter that are open, oldest first."""
    with _lock:
        return list(_open.values())


def close_all() -> None:
    """Close every open lease; every one is tried, then the first failure is raised."""
    failures: list[Exception] = []
    for lease in open_leases():
        try:
            lease.close()
        except Exception as exc:
            failures.append(exc)
    if failures:
        for extra in failures[1:]:
            log.error("closing a lease failed: %s", extra)
        raise failures[0]


def _close_at_exit() -> None:
    for lease in open_leases():
        log.warning("lease %s was still open at interpreter exit: closing it", lease.id)
        try:
            lease.close(fresh_session=True)
        except Exception as exc:
            log.error("closing lease %s at exit failed: %s", lease.id, exc)
