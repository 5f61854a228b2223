"""``cs.map``: many sandboxes at once, each item in a lease of its own, none ever left running.

The coordinator (the caller's thread) is the only one that decides: it pulls
items from the iterable only when a slot is free (so a generator is consumed
lazily, at most ``concurrency`` items ahead), hands each to the executor,
collects outcomes in input order, and draws the progress display. Item
threads only run ``fn`` and report. Stopping (the first failure, or Ctrl-C)
is the coordinator's too: no new item starts, running leases are closed from
outside (``LocalItems.stop``), and it waits until every item has let go, so
that nothing is left running when ``cs.map`` returns or raises. A second
Ctrl-C while it waits destroys the sandboxes still open at once.

With ``setup``, one lease runs ``setup(box)`` first; its sandbox is paused
and every item's lease forks it by id, which also works from another machine
(an executor's worker), since a fork needs nothing but the id and the
service. The setup lease is the coordinator's own ``with`` block, so its
sandbox is destroyed at the end whatever happens.

With ``reuse=True`` the items of this process borrow leases from a pool
(``_pool``) instead of opening one each, and the pool's leases are
closed once every item is done (or when stopping).
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeVar, overload

import attrs

from ..client import Client
from ..errors import CreateosCleanupError, add_note, attach_cleanup_failure
from ..lease import Lease
from ..lease._options import LeaseOptions, lease_options, takes_lease_keywords
from . import _items as _map_items
from ._items import LocalItems, Stopped
from ._pool import ItemFn, close_failures
from ._progress import Progress

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..lease._options import LeaseKeywords

log = logging.getLogger("createos_sync.map")

T = TypeVar("T")
R = TypeVar("R")


@overload
def map(
    fn: Callable[[Lease, T], R],
    items: Iterable[T],
    *,
    concurrency: int = ...,
    setup: Callable[[Lease], Any] | None = ...,
    reuse: bool = ...,
    return_exceptions: Literal[False] = ...,
    progress: bool | None = ...,
    executor: cf.Executor | None = ...,
    client: Client | None = ...,
    shape: str | None = ...,
    **keywords: Unpack[LeaseKeywords],
) -> list[R]: ...


@overload
def map(
    fn: Callable[[Lease, T], R],
    items: Iterable[T],
    *,
    concurrency: int = ...,
    setup: Callable[[Lease], Any] | None = ...,
    reuse: bool = ...,
    return_exceptions: bool,
    progress: bool | None = ...,
    executor: cf.Executor | None = ...,
    client: Client | None = ...,
    shape: str | None = ...,
    **keywords: Unpack[LeaseKeywords],
) -> list[R | BaseException]: ...


@takes_lease_keywords
def map(
    fn: Callable[[Lease, Any], Any],
    items: Iterable[Any],
    *,
    concurrency: int = 8,
    setup: Callable[[Lease], Any] | None = None,
    reuse: bool = False,
    return_exceptions: bool = False,
    progress: bool | None = None,
    executor: cf.Executor | None = None,
    client: Client | None = None,
    shape: str | None = None,
    **keywords: Unpack[LeaseKeywords],
) -> list[Any]:
    """Call ``fn(box, item)`` for every item, each in a sandbox of its own; results in order.

    ::

        results = cs.map(lambda box, n: box.run(f"echo {n}").stdout, range(100))

    At most ``concurrency`` leases are open at once; all share the client's
    request budget (a wait for it longer than 2 s is logged at INFO on
    ``createos_sync.budget`` and shown by the progress bar). Every lease
    follows the containment rule. The first
    failure (with ``return_exceptions=False``) or Ctrl-C stops new items,
    closes every open lease (terminating what runs) and raises: the first
    failure, with the others attached as notes, or ``KeyboardInterrupt``. A
    second Ctrl-C meanwhile destroys the sandboxes still open at once.

    Args:
        fn: called as ``fn(box, item)`` with an open ``Lease``; its return
            value is the item's result.
        items: any iterable; a generator is consumed lazily, at most
            ``concurrency`` items ahead of those finished.
        concurrency: the most leases open at once.
        setup: ``setup(box)`` runs once in a first lease; that sandbox is then
            paused, every item's lease is a fork of it, and it is destroyed
            at the end.
        reuse: run the items on a pool of at most ``concurrency`` leases
            (forks of the setup sandbox when ``setup`` is given), each running
            one item after another: an item sees what earlier items on its
            lease left in the sandbox, but no process of theirs (what an item
            leaves running is terminated before the next one starts). A lease
            whose item raised ``CreateosCleanupError`` or ``SandboxUnavailable``,
            or that ``fn`` closed or paused, is closed and replaced. Items must
            run in this process (the default executor or a ``ThreadPoolExecutor``).
        return_exceptions: a failed item's exception takes its place in the
            list instead of stopping the map.
        progress: None draws a progress bar on a terminal or in a notebook;
            True always (plain lines when output is not a terminal); False never.
        executor: a ``concurrent.futures.Executor`` to run the items on
            (default: threads of this process). On another process or
            machine (a process pool, ``distributed.Client(...).get_executor()``)
            ``fn``, the items and the results must pickle, each worker process
            uses a client of its own built from this client's configuration
            (API key included) with its machine's request budget and
            journal; stopping cancels the items not started, and the running
            ones close their leases themselves when ``fn`` returns.
        client: defaults to a ``Client()`` from the environment, closed at the end.
        shape: the machine shape of every item's lease (as in ``cs.lease``).
        **keywords: the other lease keywords, for every item's lease
            (``sandbox_id`` is refused: each item needs a sandbox of its own;
            ``start_paused`` needs ``fork_from``, and ``fn`` then resumes its box).

    Request budget: per item, what ``cs.lease`` costs to open and close (3:
    a creation, its ttl watchdog, a destroy; a fork adds its status polls)
    plus what ``fn`` sends; with ``setup``, once what the setup lease costs
    plus a pause (and 1 for holding its ttl watchdog). With ``reuse=True``,
    per item only what ``fn`` sends (3 for one ``box.run``) plus one
    termination per process it left running; the pool's opens and closes
    (at most ``concurrency`` of them, more when leases are replaced) are
    shared by all items.

    Raises:
        ValueError, TypeError: invalid arguments (before anything starts).
        KeyboardInterrupt: after every open lease was closed.
        Exception: the first item's failure (``return_exceptions=False``).
    """
    options = lease_options("map", shape, keywords)
    source = _check(fn, items, concurrency, setup, return_exceptions, progress, executor, client)
    _check_reuse(reuse, executor)
    _check_options(options, setup)
    total = len(items) if isinstance(items, Sized) else None
    owned = client is None
    client = client if client is not None else Client()
    fan = _FanOut(fn, client, concurrency, return_exceptions, executor, reuse)
    waiting = client._transport.pacer.waiting
    try:
        if setup is None:
            return fan.run(source, options, Progress(progress, total, waiting=waiting))
        with Lease(client, attrs.evolve(options, on_exit="destroy")) as base:
            setup(base)
            base.pause()
            forks = for_forks(options, base.id)
            return fan.run(source, forks, Progress(progress, total, waiting=waiting))
    finally:
        if owned and not fan.abandoned:
            client.close()


class _FanOut:
    """One ``cs.map`` call's coordinator: submissions, outcomes, stopping."""

    def __init__(
        self,
        fn: ItemFn,
        client: Client,
        concurrency: int,
        return_exceptions: bool,
        executor: cf.Executor | None,
        reuse: bool = False,
    ) -> None:
        self._fn = fn
        self._reuse = reuse
        self._client = client
        self._concurrency = concurrency
        self._return_exceptions = return_exceptions
        self._executor = executor
        self._in_process = executor is None or isinstance(executor, cf.ThreadPoolExecutor)
        self._local: LocalItems | None = None
        self._outcomes: dict[int, Any] = {}
        self._failures: list[tuple[int, BaseException]] = []
        self._cleanup: list[CreateosCleanupError] = []
        self._stopped_at: int | None = None
        self._stopped: dict[int, str] = {}  # items running when stopping closed them: outcome
        self.abandoned = False  # items may still be running (a second Ctrl-C)

    def run(self, source: Iterator[Any], options: LeaseOptions, progress: Progress) -> list[Any]:
        own_pool = None
        if self._executor is None:
            own_pool = cf.ThreadPoolExecutor(self._concurrency, thread_name_prefix="createos-map")
        executor = own_pool or self._executor
        assert executor is not None
        if self._in_process:
            self._local = LocalItems(self._client, options, self._fn, reuse=self._reuse)
        pending: dict[cf.Future[Any], int] = {}
        closing: list[CreateosCleanupError] = []  # closing the pool's leases at the end
        try:
            try:
                count = self._drive(source, options, executor, pending, progress)
                if self._local is not None:
                    closing = self._local.finish()
                    self._cleanup.extend(closing)
            except KeyboardInterrupt:
                raise
            except BaseException as error:  # the iterable or the executor failed: stop
                self._stop(pending)
                self._drain(pending, progress)
                self._raise_with_notes(error, None)
        except KeyboardInterrupt as interrupt:  # also while stopping after a failure
            self._interrupted(pending, interrupt)
            raise
        finally:
            progress.close()
            if own_pool is not None:
                own_pool.shutdown(wait=not self.abandoned, cancel_futures=True)
        if self._failures and not self._return_exceptions:
            index, first = self._failures[0]
            self._raise_with_notes(first, index)
        if closing:
            raise close_failures(closing)
        return [self._outcomes[index] for index in range(count)]

    def _drive(
        self,
        source: Iterator[Any],
        options: LeaseOptions,
        executor: cf.Executor,
        pending: dict[cf.Future[Any], int],
        progress: Progress,
    ) -> int:
        """Submit items as slots free up and collect outcomes; the number of items."""
        count = 0
        exhausted = False
        while True:
            while self._stopped_at is None and not exhausted and len(pending) < self._concurrency:
                try:
                    item = next(source)
                except StopIteration:
                    exhausted = True
                    break
                pending[self._submit(executor, options, count, item)] = count
                count += 1
                progress.running += 1
            if not pending:
                return count
            self._collect(pending, progress, timeout=progress.refresh)
            progress.show()

    def _submit(
        self, executor: cf.Executor, options: LeaseOptions, index: int, item: Any
    ) -> cf.Future[Any]:
        if self._local is not None:
            return executor.submit(self._local.run, index, item)
        return executor.submit(_map_items.remote_item, self._client.config, options, self._fn, item)

    def _collect(
        self, pending: dict[cf.Future[Any], int], progress: Progress, timeout: float | None
    ) -> None:
        # A future cancelled by stopping is finished for us at once: cf.wait reports it
        # only when its executor calls set_running_or_notify_cancel (CPython #92001), and
        # Dask's executor never does when the task's outcome arrives after the cancel (it
        # tries to set the outcome on the cancelled future and gives up), so waiting on
        # it would never end.
        cancelled = {future for future in pending if future.cancelled()}
        wait = 0 if cancelled else timeout
        done, _ = cf.wait(pending, timeout=wait, return_when=cf.FIRST_COMPLETED)
        for future in sorted(done | cancelled, key=pending.__getitem__):
            index = pending.pop(future)
            progress.running -= 1
            if future.cancelled():
                continue  # stopping: never started (or, elsewhere, closes its lease itself)
            error = future.exception()
            if isinstance(error, Stopped):
                continue  # never started either
            stopped = self._local is not None and index in self._local.stopped
            if stopped:  # closed from outside: its outcome is stopping's, not its own
                self._stopped[index] = "returned" if error is None else type(error).__name__
                if error is not None:
                    self._cleanup.extend(_cleanup_failures(error))  # containment still counts
            elif error is None:
                self._outcomes[index] = future.result()
                progress.done += 1
                continue
            else:
                self._failed(index, error, pending)
            progress.failed += 1

    def _failed(self, index: int, exc: BaseException, pending: dict[cf.Future[Any], int]) -> None:
        self._outcomes[index] = exc
        self._failures.append((index, exc))
        if not self._return_exceptions and self._stopped_at is None:
            self._stopped_at = index
            self._stop(pending)

    def _stop(self, pending: dict[cf.Future[Any], int]) -> None:
        """Start nothing more: cancel what has not started, close the running leases."""
        for future in pending:
            future.cancel()
        if self._local is not None:
            self._cleanup.extend(self._local.stop())

    def _drain(self, pending: dict[cf.Future[Any], int], progress: Progress) -> None:
        while pending:
            self._collect(pending, progress, timeout=progress.refresh)
            progress.show()

    def _interrupted(self, pending: dict[cf.Future[Any], int], interrupt: BaseException) -> None:
        """Ctrl-C: close every open lease, wait for local items; a second one destroys at once."""
        log.warning("cs.map interrupted: closing %d running items", len(pending))
        try:
            self._stopped_at = -1
            self._stop(pending)
            if self._local is not None:  # their leases are closed: fn returns soon
                cf.wait([future for future in pending if not future.cancelled()])
                for future in pending:
                    error = None if future.cancelled() else future.exception()
                    if error is not None:
                        self._cleanup.extend(_cleanup_failures(error))
            else:
                self.abandoned = bool(pending)  # remote items close their leases themselves
        except KeyboardInterrupt:
            log.warning("cs.map interrupted again: destroying the sandboxes still open")
            self.abandoned = True
            if self._local is not None:
                self._local.destroy_now()
        for failure in self._cleanup:
            attach_cleanup_failure(interrupt, failure)

    def _raise_with_notes(self, error: BaseException, index: int | None) -> NoReturn:
        if index is not None:
            add_note(error, f"cs.map: item {index} failed; no new item was started after it")
        for other_index, other in self._failures:
            if other is error:
                continue
            what = f"{type(other).__name__}: {other}"
            add_note(error, f"cs.map: item {other_index} failed too: {what}")
            self._cleanup.extend(_cleanup_failures(other))
        if self._stopped:
            stopped = ", ".join(f"{i} ({outcome})" for i, outcome in sorted(self._stopped.items()))
            add_note(error, f"cs.map: items running when it stopped, closed: {stopped}")
        seen: set[int] = {id(f) for f in _cleanup_failures(error)}
        for failure in self._cleanup:
            if id(failure) not in seen:
                seen.add(id(failure))
                attach_cleanup_failure(error, failure)
        raise error


def _check(
    fn: object,
    items: object,
    concurrency: object,
    setup: object,
    return_exceptions: object,
    progress: object,
    executor: object,
    client: object,
) -> Iterator[Any]:
    """Validate the arguments of ``map`` other than lease options; an iterator over the items."""
    if not callable(fn):
        raise TypeError("fn must be callable as fn(box, item)")
    if setup is not None and not callable(setup):
        raise TypeError("setup must be callable as setup(box), or None")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError("concurrency must be an integer >= 1")
    if not isinstance(return_exceptions, bool):
        raise TypeError("return_exceptions must be True or False")
    if progress is not None and not isinstance(progress, bool):
        raise TypeError("progress must be None, True or False")
    if executor is not None and not isinstance(executor, cf.Executor):
        raise TypeError("executor must be a concurrent.futures.Executor")
    if client is not None and not isinstance(client, Client):
        raise TypeError("client must be a createos_sync.Client")
    try:
        return iter(items)  # type: ignore[call-overload,no-any-return]
    except TypeError:
        raise TypeError("items must be iterable") from None


def _check_reuse(reuse: object, executor: object) -> None:
    if not isinstance(reuse, bool):
        raise TypeError("reuse must be True or False")
    if reuse and executor is not None and not isinstance(executor, cf.ThreadPoolExecutor):
        raise ValueError(
            "reuse=True keeps its leases in this process: use the default executor or a "
            "concurrent.futures.ThreadPoolExecutor"
        )


def _check_options(options: LeaseOptions, setup: object) -> None:
    if options.sandbox_id is not None:
        raise ValueError(
            "cs.map gives every item a sandbox of its own: sandbox_id cannot be used "
            "(use setup= to prepare one sandbox that every item forks)"
        )
    if setup is not None:
        if options.fork_from is not None:
            raise ValueError("give setup (items fork its sandbox) or fork_from, not both")
        for_forks(options, "sb-check")  # the items' options must be valid too


def for_forks(options: LeaseOptions, source_id: str | None) -> LeaseOptions:
    """Item options when every item forks ``source_id`` (a fork keeps its source's shape)."""
    if source_id is None:
        raise AssertionError("the setup lease is open, so its sandbox has an id")
    return attrs.evolve(options, fork_from=source_id, shape=None, rootfs=None, region=None)


def _cleanup_failures(exc: BaseException) -> list[CreateosCleanupError]:
    """The cleanup failures ``exc`` is or carries."""
    if isinstance(exc, CreateosCleanupError):
        return [exc]
    carried = exc.__dict__.get("_createos_cleanup_errors", [])
    return [f for f in carried if isinstance(f, CreateosCleanupError)]
