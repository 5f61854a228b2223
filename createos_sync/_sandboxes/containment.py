"""The containment rule: which processes may still run, and how their end is confirmed.

A process counts as contained once it was seen to exit, or once a
termination request answered ``tree_exited: true`` or 404. Anything else is
*unconfirmed*: the process may still be running, and the lease that started
it is poisoned. A creation request that failed without a clear answer is
ambiguous (a process may exist that nobody knows the id of): that poisons
the lease too. A poisoned lease destroys its sandbox when it closes, whatever
its ``on_exit``, and says so with ``CreateosCleanupError``.

Closing races the threads that start processes: once the lease closes, the
table refuses new creations, and closing waits for those already sent, so
that it terminates every process whose creation was sent before it began. A
creation still unanswered when that wait ends counts as ambiguous.

Cleanup runs on a fresh budget (``Config.cleanup_timeout``), shared out
between its steps (``CleanupTime``): waiting for creations, terminating,
retrying, reading, destroying. Each step gets its own share, and the
requests of one step are sent side by side, so that one request that hangs
cannot eat the time of the others or of the steps after it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

import attrs

from .._wire import api as _api
from .._wire.deadline import Clock, Deadline
from .._wire.http import Transport
from ..errors import CreateosError, LeaseClosed

log = logging.getLogger("createos_sync.containment")

DEFAULT_GRACE = 1.0
# A termination's answer comes once the tree exits or the grace ran out (then SIGKILL):
# its deadline always covers the grace, plus this much for the request itself.
GRACE_MARGIN = 2.0
MAX_PARALLEL = 16  # terminations in flight at once (the session's pool holds 32)

# Shares of the cleanup time: a step may use its share, and no more.
CREATIONS_SHARE = 1 / 6
TERMINATE_SHARE = 1 / 6
RETRY_SHARE = 1 / 6
READ_SHARE = 1 / 6
DESTROY_SHARE = 1 / 3


@attrs.frozen
class CleanupTime:
    """A fresh cleanup budget, shared out between the steps of the containment rule.

    Every step gets a deadline of its own share, starting when the step
    starts; the last step (destroying the sandbox, or pausing it) gets
    whatever remains of the whole budget if that is more than its share.
    """

    total: float
    whole: Deadline
    clock: Clock = attrs.field(default=time.monotonic, repr=False)

    @classmethod
    def start(cls, total: float, clock: Clock = time.monotonic) -> CleanupTime:
        return cls(total, Deadline.after(total, clock), clock)

    @classmethod
    def of(cls, transport: Transport) -> CleanupTime:
        """The budget of the client's ``cleanup_timeout``, starting now."""
        return cls.start(transport.config.cleanup_timeout)

    def creations(self) -> Deadline:
        """For waiting on process creations already sent."""
        return self._share(CREATIONS_SHARE)

    def terminate(self, grace: float = DEFAULT_GRACE) -> Deadline:
        """For a termination: its share, but never less than the grace the service waits."""
        return self._share(TERMINATE_SHARE, at_least=grace + GRACE_MARGIN)

    def retry(self, grace: float = DEFAULT_GRACE) -> Deadline:
        return self._share(RETRY_SHARE, at_least=grace + GRACE_MARGIN)

    def read(self) -> Deadline:
        return self._share(READ_SHARE)

    def destroy(self) -> Deadline:
        """For destroying (or pausing) the sandbox: its share, or all that is left if more."""
        return Deadline.after(max(DESTROY_SHARE * self.total, self.whole.remaining()), self.clock)

    def _share(self, share: float, at_least: float = 0.0) -> Deadline:
        return Deadline.after(max(share * self.total, at_least), self.clock)


class ProcessTable:
    """A lease's ledger of its processes; safe to use from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._unfinished: dict[str, None] = {}
        self._unconfirmed: dict[str, None] = {}
        self._cut: set[str] = set()
        self._ambiguous = 0
        self._in_flight = 0
        self.closing = threading.Event()
        self.expired = False  # closed by its max_lifetime rather than by close()

    @contextlib.contextmanager
    def creating(self) -> Iterator[None]:
        """Around one process creation, up to ``started``: refused once the lease closes."""
        with self._lock:
            if self.closing.is_set():
                raise LeaseClosed("this lease is closing: no new process may start in it")
            self._in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1
                self._lock.notify_all()

    def shut(self, deadline: Deadline) -> None:
        """Refuse new creations, then wait for those in flight (ambiguous if still unanswered)."""
        with self._lock:
            self.closing.set()
            self._lock.wait_for(lambda: self._in_flight == 0, deadline.remaining())
            late = self._in_flight
            self._ambiguous += late
        if late:
            log.error("%d process creation(s) were still unanswered at close", late)

    def started(self, process_id: str) -> None:
        with self._lock:
            self._unfinished[process_id] = None

    def finished(self, process_id: str) -> None:
        """The process was seen to exit (its leader: an unconfirmed tree stays unconfirmed)."""
        with self._lock:
            self._unfinished.pop(process_id, None)

    def unconfirmed(self, process_id: str) -> None:
        """Termination was tried and could not be confirmed."""
        with self._lock:
            self._unfinished.pop(process_id, None)
            self._unconfirmed[process_id] = None

    def settle(self, process_id: str, confirmed: bool) -> None:
        """Record the outcome of a termination."""
        if not confirmed:
            self.unconfirmed(process_id)
            return
        with self._lock:
            self._unfinished.pop(process_id, None)
            self._unconfirmed.pop(process_id, None)

    def was_cut(self, process_id: str) -> bool:
        """Whether closing the lease terminated this process."""
        with self._lock:
            return process_id in self._cut

    def ambiguous_creation(self) -> None:
        with self._lock:
            self._ambiguous += 1

    def unfinished(self) -> list[str]:
        with self._lock:
            return list(self._unfinished)

    @property
    def unconfirmed_ids(self) -> list[str]:
        with self._lock:
            return list(self._unconfirmed)

    @property
    def ambiguous(self) -> int:
        with self._lock:
            return self._ambiguous

    @property
    def poisoned(self) -> bool:
        with self._lock:
            return bool(self._unconfirmed) or self._ambiguous > 0

    def why_poisoned(self) -> str:
        """What makes containment unconfirmed, in words."""
        reasons = []
        if self.unconfirmed_ids:
            reasons.append(
                f"termination of process {', '.join(self.unconfirmed_ids)} could not be confirmed"
            )
        if self.ambiguous:
            reasons.append(f"{self.ambiguous} process creation(s) had an unknown outcome")
        return "; ".join(reasons)

    def cut(self, process_ids: list[str]) -> None:
        """Closing the lease is about to terminate these processes."""
        with self._lock:
            self._cut.update(process_ids)


def confirm_ends(
    transport: Transport,
    sandbox_id: str,
    process_ids: list[str],
    *,
    budget: CleanupTime,
    grace: float = DEFAULT_GRACE,
) -> list[str]:
    """Close steps 1-3 for these processes; the ids whose end stays unconfirmed.

    Step by step, each on its own share of ``budget``, the requests of a step
    side by side: terminate all; terminate again those not confirmed; read
    those still not confirmed. Costs one request per process when the first
    termination is confirmed, at most three.
    """

    def terminate(attempt: int, deadline: Deadline) -> Callable[[str], bool]:
        return lambda process_id: _terminated(
            transport, sandbox_id, process_id, grace, deadline, attempt
        )

    left = list(process_ids)
    for attempt, share in ((1, budget.terminate), (2, budget.retry)):
        if left:
            left = _failing(terminate(attempt, share(grace)), left)
    if left:
        deadline = budget.read()
        left = _failing(lambda p: _read_exited(transport, sandbox_id, p, deadline), left)
    return left


def terminate_confirmed(
    transport: Transport,
    sandbox_id: str,
    process_id: str,
    *,
    budget: CleanupTime,
    grace: float = DEFAULT_GRACE,
) -> bool:
    """Terminate one process tree (terminate, retry once, read); True if its end is confirmed."""
    return not confirm_ends(transport, sandbox_id, [process_id], budget=budget, grace=grace)


def terminate_unfinished(
    transport: Transport, sandbox_id: str, table: ProcessTable, budget: CleanupTime
) -> None:
    """Close steps 0-3: wait for creations in flight, then confirm every unfinished end."""
    table.shut(budget.creations())
    process_ids = table.unfinished()
    table.cut(process_ids)
    left = set(confirm_ends(transport, sandbox_id, process_ids, budget=budget))
    for process_id in process_ids:
        table.settle(process_id, process_id not in left)


def _terminated(
    transport: Transport,
    sandbox_id: str,
    process_id: str,
    grace: float,
    deadline: Deadline,
    attempt: int,
) -> bool:
    try:
        record = _api.terminate_process(transport, sandbox_id, process_id, grace, deadline)
    except CreateosError as exc:
        log.warning("termination %d of process %s failed: %s", attempt, process_id, exc)
        return False
    if record is None or record.get("tree_exited") is True:
        return True
    log.warning("termination %d of process %s left its tree running", attempt, process_id)
    return False


def _read_exited(
    transport: Transport, sandbox_id: str, process_id: str, deadline: Deadline
) -> bool:
    try:
        record = _api.get_process(transport, sandbox_id, process_id, deadline)
    except CreateosError as exc:
        log.warning("could not read process %s after termination: %s", process_id, exc)
        return False
    return record is None or record.get("tree_exited") is True


def _failing(check: Callable[[str], bool], items: list[str]) -> list[str]:
    """The items for which ``check`` is not True, checked side by side (at most MAX_PARALLEL)."""
    if len(items) == 1:
        return [] if check(items[0]) else items
    passed: set[str] = set()
    queue = iter(items)
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                item = next(queue, None)
            if item is None:
                return
            try:
                if check(item):
                    with lock:
                        passed.add(item)
            except Exception:  # unconfirmed, and said so: never let a worker die silently
                log.exception("confirming the end of process %s failed", item)

    workers = []
    for _ in range(min(MAX_PARALLEL, len(items))):
        worker = threading.Thread(target=work, name="createos-cleanup", daemon=True)
        try:
            worker.start()
        except RuntimeError:  # no new threads at interpreter shutdown: this one does the work
            break
        workers.append(worker)
    if not workers:
        work()
    for worker in workers:
        worker.join()
    return [item for item in items if item not in passed]
