"""One ``cs.map`` item: a lease of its own around ``fn(box, item)``, here or on another machine.

In this process (threads: the default, or a ``ThreadPoolExecutor``) the
items share the caller's client, hence its request budget, and ``LocalItems``
knows every lease that is open, so that the coordinator can close the running
ones from outside when it stops (a failure, Ctrl-C): closing a lease
terminates its processes, which ends a ``run`` in progress, so ``fn``
returns soon after. With ``reuse=True`` the leases come from a ``Pool``
(``_pool``) and go back to it, and stopping closes its idle ones too.

On another executor (processes, a Dask cluster) nothing of the caller's
process is reachable: ``remote_item`` is a plain module-level function (it
pickles) that builds a client from the caller's configuration once per
worker process (so each machine paces itself with its own budget and keeps
its own journal) and closes its lease itself, whatever ``fn`` does; a
worker process that dies closes its open leases in its exit hook.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from ..client import Client, client_for
from ..config import Config
from ..errors import CreateosCleanupError
from ..lease import Lease
from ..lease._options import LeaseOptions
from ._pool import ItemFn, Pool


def in_lease(lease: Lease, fn: ItemFn, item: Any) -> Any:
    """``fn(lease, item)`` on an open lease, then close it by the containment rule.

    As in ``with lease:``: a cleanup failure after a success raises, one after
    a failure is attached to that failure as a note.
    """
    try:
        result = fn(lease, item)
    except BaseException as exc:
        lease.__exit__(type(exc), exc, exc.__traceback__)
        raise
    lease.close()
    return result


class LocalItems:
    """Items run in threads of this process, on one client; ``stop`` closes the running ones."""

    def __init__(
        self, client: Client, options: LeaseOptions, fn: ItemFn, *, reuse: bool = False
    ) -> None:
        self._client = client
        self._options = options
        self._fn = fn
        self._pool = Pool(client, options) if reuse else None
        self._lock = threading.Lock()
        self._open: dict[int, Lease] = {}
        self._stopping = False
        self.stopped: set[int] = set()  # items whose lease was closed from outside

    def run(self, index: int, item: Any) -> Any:
        """Run one item (in a worker thread)."""
        with self._lock:
            if self._stopping:
                self.stopped.add(index)
                raise Stopped(index)
        if self._pool is not None:
            lease = self._pool.borrow()
        else:
            lease = Lease(self._client, self._options).open()
        with self._lock:
            stopping = self._stopping
            if stopping:
                self.stopped.add(index)
            else:
                self._open[index] = lease
        if stopping:  # opened while the coordinator stopped: never call fn
            lease.close()
            raise Stopped(index)
        try:
            if self._pool is not None:
                return self._pool.use(lease, self._fn, item)
            return in_lease(lease, self._fn, item)
        finally:
            with self._lock:
                self._open.pop(index, None)

    def stop(self) -> list[CreateosCleanupError]:
        """Start no more items; close the open leases (in parallel); their cleanup failures."""
        with self._lock:
            self._stopping = True
            leases = dict(self._open)
            self.stopped.update(leases)
        return close_all([*leases.values(), *self._idle()])

    def finish(self) -> list[CreateosCleanupError]:
        """Every item is done: close the pool's leases (in parallel); their cleanup failures."""
        return close_all(self._idle())

    def destroy_now(self) -> None:
        """A second Ctrl-C: destroy the sandboxes still open at once, without waiting."""
        with self._lock:
            self._stopping = True
            leases = [*self._open.values(), *self._idle()]
        for lease in leases:
            if not lease.closed:
                lease._destroy_now()

    def _idle(self) -> list[Lease]:
        return self._pool.drain() if self._pool is not None else []


class Stopped(Exception):
    """The item's lease was closed (or never opened) because ``cs.map`` was stopping."""

    def __init__(self, index: int) -> None:
        super().__init__(f"item {index} was stopped by cs.map")


def close_all(leases: Iterable[Lease]) -> list[CreateosCleanupError]:
    """Close leases at once, one thread each (a close waits on the network); the failures."""
    failures: list[CreateosCleanupError] = []
    lock = threading.Lock()

    def close(lease: Lease) -> None:
        try:
            lease.close()
        except CreateosCleanupError as failure:
            with lock:
                failures.append(failure)

    threads = [
        threading.Thread(target=close, args=(lease,), name="createos-map-close", daemon=True)
        for lease in leases
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failures


_clients: dict[Config, Client] = {}
_clients_lock = threading.Lock()


def remote_item(config: Config, options: LeaseOptions, fn: ItemFn, item: Any) -> Any:
    """Run one item where an executor put it (it pickles): a lease on this process's client."""
    with _clients_lock:
        client = _clients.get(config)
        if client is None:
            client = _clients[config] = client_for(config)
    lease = Lease(client, options).open()
    return in_lease(lease, fn, item)
