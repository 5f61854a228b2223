"""Forks: a sandbox made from another one's disk; a creation, so never repeated blind.

The service takes no name on a fork (the official fork body has none), so a
fork whose answer was lost cannot be found by its name as a creation is
(``_sandbox.ByName``). A fork goes through the same ``_sandbox.created`` as
a creation, with ``LostFork`` as its recovery. The rule, after an unknown
outcome (500, 502, 504, a lost or malformed answer, an interruption):

1. List the sandboxes. The *candidates* are those that name the source as
   ``forked_from``, are not destroyed, were created no earlier than
   ``CLOCK_MARGIN`` seconds before the request left (the margin absorbs the
   skew between this machine's clock and the service's), and that no lease on
   this machine has claimed: no fork this process got an answer for, and no
   sandbox id in the lease journal. When no answer came at all and nothing
   is found, the listing is repeated after the pauses of ``_sandbox.late_looks``
   (the fork may still be on its way).
2. Other forks of the same source that are in flight would blur the picture,
   so a recovery in this process first waits until every fork of that source
   sent from this process has its answer (those whose answers are lost too
   join the same recovery), and holds new ones back until it is done; forks
   of the same source still in flight in other processes of this machine
   (journal entries without a sandbox id) are waited for, within the cleanup
   deadline.
3. No candidate: the fork was not made. No more candidates than lost forks,
   and nothing of that source left unanswered on this machine: they are the
   lost forks, and are destroyed. Anything else (more candidates than lost
   forks: someone else forked the same source in the window; or a fork still
   unanswered): the lease cannot tell its own from another's, destroys none,
   and raises ``CreateosCleanupError`` naming them all.

A fork found this way is destroyed, not adopted, as a creation whose reply
was lost is: a sandbox attributed by a listing is never run in. The caller
may fork again; the error says what is known. 429 and 503 are refusals (the
service did not process the request) and are retried by the transport, as
for every creation (``_retry.REFUSED_STATUSES``).

Request budget of a fork: 1 request, plus status polls until it settles;
after a lost answer, 1 listing per 500 sandboxes (3 when no answer came and
nothing is found) plus 1 destroy per fork found.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

import attrs

from .._wire import api as _api
from .._wire import retry as _retry
from .._wire.deadline import Deadline
from .._wire.http import Transport
from .._wire.server_text import checked_id
from ..errors import (
    CreateosCleanupError,
    CreateosError,
    Operation,
    OperationTimeout,
    SandboxUnavailable,
    may_have_taken_effect,
    restated,
)
from ..models import SANDBOX_TRANSITIONAL, SandboxInfo
from . import sandbox as _sandbox
from . import shield as _shield
from .journal import Entry, Journal

log = logging.getLogger("createos_sync.fork")

CLOCK_MARGIN = 30.0
GONE = frozenset({"destroying", "destroyed"})


@attrs.frozen
class _Verdict:
    """What a recovery found out about the lost forks of one round."""

    destroyed: tuple[str, ...] = ()
    failure: CreateosCleanupError | None = None


@attrs.define
class _Round:
    """The forks of one source whose answers were lost, recovered together."""

    names: list[str] = attrs.Factory(list)
    sent_at: float = float("inf")
    verdict: _Verdict | None = None


class _Gate:
    """The forks of one source sent from this process: in flight, claimed, being recovered."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.in_flight = 0
        self.claimed: set[str] = set()
        self.round: _Round | None = None

    def wait_calm(self, deadline: Deadline) -> None:
        """Wait until no recovery of this source is under way."""
        with self.cond:
            if not self.cond.wait_for(
                lambda: self.round is None, timeout=max(0.0, deadline.remaining())
            ):
                raise OperationTimeout(
                    Operation.SANDBOX_FORK,
                    deadline.seconds,
                    "a recovery of a lost fork of the same source was still under way",
                )

    def enter(self) -> bool:
        """Count a fork in flight if no recovery is under way (else False: wait again)."""
        with self.cond:
            if self.round is not None:
                return False
            self.in_flight += 1
            return True

    def answered(self, sandbox_id: str | None) -> None:
        with self.cond:
            self.in_flight -= 1
            if sandbox_id is not None:
                self.claimed.add(sandbox_id)
            self.cond.notify_all()

    def lost(self, name: str, sent_at: float) -> tuple[_Round, bool]:
        """Join (or open) the recovery round; True when this fork leads it."""
        with self.cond:
            self.in_flight -= 1
            leads = self.round is None
            if self.round is None:
                self.round = _Round()
            self.round.names.append(name)
            self.round.sent_at = min(self.round.sent_at, sent_at)
            self.cond.notify_all()
            return self.round, leads

    def drain(self, deadline: Deadline) -> int:
        """Wait until no fork of this source is in flight; how many still are."""
        with self.cond:
            self.cond.wait_for(lambda: self.in_flight == 0, timeout=max(0.0, deadline.remaining()))
            return self.in_flight

    def close_round(self, verdict: _Verdict) -> None:
        with self.cond:
            assert self.round is not None
            self.round.verdict = verdict
            self.round = None
            self.cond.notify_all()

    def await_verdict(self, round_: _Round, deadline: Deadline) -> _Verdict | None:
        with self.cond:
            self.cond.wait_for(
                lambda: round_.verdict is not None, timeout=max(0.0, deadline.remaining())
            )
            return round_.verdict


_gates: dict[tuple[str, str], _Gate] = {}
_gates_lock = threading.Lock()


def _reset_after_fork() -> None:
    # A child of os.fork() has none of its parent's forks in flight, and a lock a parent
    # thread held at that moment would never be released here.
    global _gates_lock
    _gates.clear()
    _gates_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _gate(base_url: str, source_id: str) -> _Gate:
    with _gates_lock:
        return _gates.setdefault((base_url, source_id), _Gate())


class LostFork:
    """The recovery of one fork (``_sandbox.Recovery``): by its source, as the module says."""

    def __init__(
        self,
        transport: Transport,
        source_id: str,
        name: str,
        journal: Journal | None,
        deadline: Deadline,
    ) -> None:
        self.transport = transport
        self.source_id = source_id
        self.name = name  # the fork's journal entry
        self.journal = journal
        self.deadline = deadline
        self.gate = _gate(transport.config.base_url, source_id)
        self.round: _Round | None = None  # set once the answer is lost
        self.leads = False
        self.verdict: _Verdict | None = None

    def attempt(self, request: Callable[[], Mapping[str, Any]]) -> Mapping[str, Any]:
        """Send the fork, counted among its source's forks in flight until it is answered."""
        while True:  # called held: only the waits let an interrupt in
            with _shield.delivered():
                self.gate.wait_calm(self.deadline)
            if self.gate.enter():
                break
        sent_at = time.time()
        try:
            with _shield.delivered():
                record = request()
            sandbox_id = checked_id(record.get("id"), "sandbox id in the answer to a sandbox fork")
        except BaseException as exc:
            if may_have_taken_effect(exc):
                self.round, self.leads = self.gate.lost(self.name, sent_at)
            else:
                self.gate.answered(None)
            raise
        self.gate.answered(sandbox_id)
        return record

    def recover(
        self, exc: BaseException, deadline: Deadline, sleep: _retry.Sleep
    ) -> CreateosCleanupError | None:
        round_ = self.round
        if round_ is None:
            return None  # interrupted before it was sent: nothing was asked for
        if self.leads:
            recovery = _Recovery(self.transport, self.source_id, self.journal, deadline, sleep)
            self.verdict = recovery.run(self.gate, round_, _sandbox.late_looks(exc))
        else:
            self.verdict = self.gate.await_verdict(round_, deadline) or _Verdict(
                failure=_unknown(self.source_id, "its recovery did not finish in time")
            )
        return self.verdict.failure

    def explained(self, exc: BaseException) -> BaseException:
        if self.verdict is None:
            return exc
        if self.verdict.destroyed:
            found = f"fork {', '.join(self.verdict.destroyed)} was found and destroyed"
        else:
            found = "no fork of it made since the request exists"
        gone = f"the outcome of forking {self.source_id} was unknown; {found}"
        return restated(exc, gone)

    def interrupted(self) -> CreateosCleanupError:
        return _unknown(
            self.source_id,
            "looking for it was interrupted (`createos-sync reap` resolves it by its source "
            "from the lease journal)",
        )


def _unknown(source_id: str, why: str) -> CreateosCleanupError:
    return CreateosCleanupError(
        f"forking {source_id} may have made a sandbox, but {why}; "
        "check with `createos-sync ls` for a sandbox forked from it",
        sandbox_id=None,
        sandbox_destroyed=None,
    )


class _Recovery:
    """The leader's side of a recovery round: list, attribute, destroy (see module docstring)."""

    def __init__(
        self,
        transport: Transport,
        source_id: str,
        journal: Journal | None,
        deadline: Deadline,
        sleep: _retry.Sleep,
    ) -> None:
        self.transport = transport
        self.source_id = source_id
        self.journal = journal
        self.deadline = deadline
        self.sleep = sleep

    def run(self, gate: _Gate, round_: _Round, pauses: tuple[float, ...]) -> _Verdict:
        verdict = _Verdict(failure=_unknown(self.source_id, "its recovery was interrupted"))
        try:
            with _shield.delivered():
                unanswered = gate.drain(self.deadline)
            with gate.cond:
                lost, claimed = len(round_.names), set(gate.claimed)
            verdict = self._decide(round_, lost, claimed, unanswered, pauses)
        finally:
            gate.close_round(verdict)
        return verdict

    def _decide(
        self,
        round_: _Round,
        lost: int,
        claimed: set[str],
        unanswered: int,
        pauses: tuple[float, ...],
    ) -> _Verdict:
        try:
            with _shield.delivered():
                unanswered += self._wait_for_other_processes(round_.names)
            found = self._look(round_.sent_at - CLOCK_MARGIN, claimed, pauses)
        except CreateosError as exc:
            log.error("could not look for a lost fork of %s: %s", self.source_id, exc)
            return _Verdict(failure=_unknown(self.source_id, "its sandbox could not be looked up"))
        if found is None:
            return _Verdict(failure=_unknown(self.source_id, "the service does not list forks"))
        if not found:
            return _Verdict()
        if len(found) > lost or unanswered:
            return _Verdict(failure=_ambiguous(self.source_id, found))
        return self._destroy(found)

    def _look(self, since: float, claimed: set[str], pauses: tuple[float, ...]) -> list[str] | None:
        """The candidates (None: the listing does not say which sandboxes are forks)."""
        for pause in (0.0, *pauses):
            if pause:
                with _shield.delivered():
                    self.sleep(pause)
            with _shield.delivered():
                listing = list(_api.list_sandboxes(self.transport, self.deadline))
            if not _api.reports_forks(listing):
                return None
            # Read after the listing: a fork another lease got meanwhile is claimed by now.
            found = _candidates(listing, self.source_id, since, claimed | self._journaled_ids())
            if found:
                return found
        return []

    def _destroy(self, found: list[str]) -> _Verdict:
        for sandbox_id in found:
            log.warning("fork %s of %s was made although its answer was lost: destroying it",
                        sandbox_id, self.source_id)  # fmt: skip
            with _shield.delivered():
                destroyed = _sandbox.destroy(self.transport, sandbox_id, self.deadline)
            if not destroyed:
                return _Verdict(
                    failure=CreateosCleanupError(
                        f"fork {sandbox_id} of {self.source_id} was made although its answer "
                        "was lost, and destroying it failed: it may still be running",
                        sandbox_id=sandbox_id,
                        sandbox_destroyed=False,
                    )
                )
        return _Verdict(destroyed=tuple(found))

    def _entries(self) -> list[Entry]:
        if self.journal is None:  # journal=False: no other lease's claims are known here
            return []
        try:
            entries = self.journal.entries()
        except OSError as exc:  # an unreadable journal hides no claim of this process
            log.warning("the lease journal could not be read: %s", exc)
            return []
        base_url = self.transport.config.base_url
        return [e for e in entries if e.base_url == base_url]

    def _journaled_ids(self) -> set[str]:
        return {e.sandbox_id for e in self._entries() if e.sandbox_id is not None}

    def _wait_for_other_processes(self, ours: list[str]) -> int:
        """Wait for other live processes' forks of the source to be answered; how many are not.

        This process's own forks are the gate's: one journaled but not sent
        yet waits for this very recovery, and must not be waited for here.
        """
        me = (socket.gethostname(), os.getpid())

        def in_flight() -> list[str]:
            return [
                e.name
                for e in self._entries()
                if e.fork_from == self.source_id
                and e.sandbox_id is None
                and e.name not in ours
                and (e.host, e.pid) != me
                and e.owner_alive() is not False
            ]

        try:
            _retry.poll(
                in_flight,
                lambda names: not names,
                deadline=self.deadline,
                operation=Operation.SANDBOX_FORK,
                sleep=self.sleep,
            )
        except OperationTimeout:
            return len(in_flight())
        return 0


def _candidates(
    listing: list[dict[str, Any]], source_id: str, since: float, claimed: set[str]
) -> list[str]:
    infos = [SandboxInfo.from_api(item) for item in listing]
    found = unclaimed_forks(infos, source_id, since, claimed)
    return [checked_id(sandbox_id, "sandbox id in the sandbox listing") for sandbox_id in found]


def unclaimed_forks(
    sandboxes: list[SandboxInfo], source_id: str, since: float, claimed: set[str]
) -> list[str]:
    """Ids of the live forks of ``source_id`` made since ``since`` that nobody claims."""
    return [
        s.id
        for s in sandboxes
        if s.forked_from == source_id
        and s.status not in GONE
        and s.created_at is not None
        and _epoch(s.created_at) >= since
        and s.id not in claimed
    ]


def _epoch(moment: datetime) -> float:
    if moment.tzinfo is None:  # the service speaks UTC
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def _ambiguous(source_id: str, found: list[str]) -> CreateosCleanupError:
    return CreateosCleanupError(
        f"forking {source_id} had an unknown outcome, and {len(found)} recent fork(s) of it "
        f"that no lease here claims exist ({', '.join(found)}): one may be this lease's, "
        "another someone else's, so none was destroyed; destroy yours with "
        "`createos-sync destroy ID`",
        sandbox_id=found[0] if len(found) == 1 else None,
        sandbox_destroyed=None,
    )


def settle_paused(
    transport: Transport,
    info: SandboxInfo,
    deadline: Deadline,
    sleep: _retry.Sleep,
) -> SandboxInfo:
    """Wait until a fork asked for with ``start_paused`` is paused (pausing it if it runs)."""
    if info.status in SANDBOX_TRANSITIONAL:
        info = _sandbox.settle(transport, info.id, deadline, sleep)
    if info.status == "running":
        return _sandbox.pause(transport, info.id, deadline, sleep)
    if info.status != "paused":
        raise SandboxUnavailable(info.id, info.status, "the fork did not reach paused")
    return info
