"""The containment rule: which processes may still run, and how their end is confirmed.

A process counts as contained once it was seen to exit, or once a
termination request answered ``tree_exited: true`` or 404. Anything else is
*unconfirmed*: the process may still be running, and the lease that started
it is poisoned. A creation request that failed without a clear answer is
ambiguous (a process may exist that nobody knows the id of): that poisons
the lease too. A poisoned lease destroys its sandbox when it closes, whatever
its ``on_exit``, and says so with ``CreateosCleanupError``.
"""

from __future__ import annotations

import logging
import threading

from . import _api
from ._deadline import Deadline
from ._http import Transport
from .errors import CreateosError

log = logging.getLogger("createos_sync.containment")

DEFAULT_GRACE = 1.0


class ProcessTable:
    """A lease's ledger of its processes; safe to use from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._unfinished: dict[str, None] = {}
        self._unconfirmed: dict[str, None] = {}
        self._ambiguous = 0

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


def terminate_confirmed(
    transport: Transport,
    sandbox_id: str,
    process_id: str,
    *,
    deadline: Deadline,
    grace: float = DEFAULT_GRACE,
) -> bool:
    """Terminate a process tree, retrying once, then reading it; True if its end is confirmed.

    Costs one request when the first termination is confirmed, at most three.
    """
    for attempt in (1, 2):
        try:
            record = _api.terminate_process(transport, sandbox_id, process_id, grace, deadline)
        except CreateosError as exc:
            log.warning("termination %d of process %s failed: %s", attempt, process_id, exc)
            continue
        if record is None or record.get("tree_exited") is True:
            return True
        log.warning("termination %d of process %s left its tree running", attempt, process_id)
    try:
        record = _api.get_process(transport, sandbox_id, process_id, deadline)
    except CreateosError as exc:
        log.warning("could not read process %s after termination: %s", process_id, exc)
        return False
    return record is None or record.get("tree_exited") is True


def terminate_unfinished(
    transport: Transport, sandbox_id: str, table: ProcessTable, deadline: Deadline
) -> None:
    """Close steps 1-3 for every process not seen to exit; outcomes go to ``table``."""
    for process_id in table.unfinished():
        table.settle(
            process_id, terminate_confirmed(transport, sandbox_id, process_id, deadline=deadline)
        )
