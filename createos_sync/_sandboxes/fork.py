"""Forks: a sandbox made from another one's disk; a creation, so never repeated blind.

The service takes no name on a fork, so a fork carries its lease's unique
journal name in its environment instead (``MARKER``, in the request's
``envs``: no extra request; the service lays a fork's ``envs`` over its
source's). A fork goes through the same ``_sandbox.created`` as a creation,
with ``LostFork`` as its recovery. After an unknown outcome (500, 502, 504,
a lost or malformed answer, an interruption), the rule is: destroy only
what can be proven to be this fork.

1. List the sandboxes. The *candidates* are the live forks of the source
   that no lease of this machine claims (no fork this process got an answer
   for, no sandbox id in the lease journal). There is no time window: the
   service's clock may be far off ours, and the marker decides, not the time.
2. Read each candidate's marker (a one-shot ``printenv``, once it runs). The
   one that carries this fork's name is this fork: it is destroyed. A
   candidate with another marker, or none, is someone else's (another
   lease, another machine, a ``journal=False`` lease): it is never touched.
3. None found: when no answer came at all, the listing is repeated after
   the pauses of ``_sandbox.late_looks`` (the fork may still be on its way).
   Still none, and every candidate read: no fork was made. Some candidate
   could not be read (paused, failed to answer): the outcome is unsettled,
   ``CreateosCleanupError`` names those candidates and the journal entry
   stays, for ``reap`` (which applies the same rule).

A fork found this way is destroyed, not adopted, as a creation whose reply
was lost is. The caller may fork again; the error says what is known. 429
and 503 are refusals (the service did not process the request) and are
retried by the transport, as for every creation (``_retry.REFUSED_STATUSES``).

Request budget of a fork: 1 request, plus status polls until it settles;
after a lost answer, 1 listing per 500 sandboxes (3 when no answer came and
nothing is found), 1 marker read per candidate (plus its status polls while
it is still being made), 1 destroy for the fork found.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from .._wire import api as _api
from .._wire import retry as _retry
from .._wire.deadline import Deadline
from .._wire.http import Transport
from .._wire.server_text import checked_id
from ..config import service_key
from ..errors import (
    CreateosApiError,
    CreateosCleanupError,
    CreateosError,
    SandboxUnavailable,
    may_have_taken_effect,
    restated,
)
from ..models import SANDBOX_TRANSITIONAL, SandboxInfo
from . import sandbox as _sandbox
from . import shield as _shield
from .journal import Journal

log = logging.getLogger("createos_sync.fork")

MARKER = "CREATEOS_SYNC_FORK"  # in a fork's env: the journal name of the lease that made it
GONE = frozenset({"destroying", "destroyed"})

# The forks this process got an answer for, by service: never a lost fork, never read.
_claimed: dict[str, set[str]] = {}
_claimed_lock = threading.Lock()


def marked(body: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The fork request's body, its ``envs`` carrying ``name`` as the marker."""
    return {**body, "envs": {**body.get("envs", {}), MARKER: name}}


def _claim(transport: Transport, sandbox_id: str) -> None:
    with _claimed_lock:
        _claimed.setdefault(service_key(transport.config.base_url), set()).add(sandbox_id)


def _claims(transport: Transport) -> set[str]:
    with _claimed_lock:
        return set(_claimed.get(service_key(transport.config.base_url), ()))


@attrs.frozen
class _Verdict:
    """What a recovery found out: the fork destroyed, or the candidates it could not read."""

    destroyed: str | None = None
    unread: tuple[str, ...] = ()
    failure: CreateosCleanupError | None = None


class LostFork:
    """The recovery of one fork (``sandbox.LostCreation``): by its marker, as the module says."""

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
        self.name = name  # the fork's journal entry, and its marker
        self.journal = journal
        self.deadline = deadline
        self.sent = False
        self.verdict: _Verdict | None = None

    def attempt(self, request: Callable[[], Mapping[str, Any]]) -> Mapping[str, Any]:
        """Send the fork (held: only the wait lets an interrupt in)."""
        self.sent = True
        with _shield.delivered():
            record = request()
        _claim(self.transport, checked_id(record.get("id"), "sandbox id in the answer to a fork"))
        return record

    def recover(
        self, exc: BaseException, deadline: Deadline, sleep: _retry.Sleep
    ) -> CreateosCleanupError | None:
        if not self.sent or not may_have_taken_effect(exc):
            return None  # nothing was asked for, or it was refused
        self.verdict = _Search(self, deadline, sleep).run(_sandbox.late_looks(exc))
        return self.verdict.failure

    def explained(self, exc: BaseException) -> BaseException:
        if self.verdict is None:
            return exc
        if self.verdict.destroyed:
            found = f"fork {self.verdict.destroyed} was found and destroyed"
        else:
            found = "no fork of it carrying this lease's marker exists"
        return restated(exc, f"the outcome of forking {self.source_id} was unknown; {found}")

    def interrupted(self) -> CreateosCleanupError:
        return _unknown(
            self.source_id,
            "looking for it was interrupted (`createos-sync reap` finds it by its marker "
            "from the lease journal)",
        )


class _Search:
    """List, read the candidates' markers, destroy the one that is this fork's."""

    def __init__(self, lost: LostFork, deadline: Deadline, sleep: _retry.Sleep) -> None:
        self.lost = lost
        self.transport = lost.transport
        self.deadline = deadline
        self.sleep = sleep
        self.read: set[str] = set()  # candidates whose marker was read (not ours)

    def run(self, pauses: tuple[float, ...]) -> _Verdict:
        source = self.lost.source_id
        try:
            for pause in (0.0, *pauses):
                if pause:
                    with _shield.delivered():
                        self.sleep(pause)
                with _shield.delivered():
                    listing = list(_api.list_sandboxes(self.transport, self.deadline))
                if not _api.reports_forks(listing):
                    return _Verdict(failure=_unknown(source, "the service does not list forks"))
                verdict = self._identify(listing)
                if verdict.destroyed or verdict.failure:
                    return verdict
        except CreateosError as exc:
            log.error("could not look for a lost fork of %s: %s", source, exc)
            return _Verdict(failure=_unknown(source, "its sandbox could not be looked up"))
        if verdict.unread:
            return _Verdict(unread=verdict.unread, failure=_unsettled(source, verdict.unread))
        return verdict

    def _identify(self, listing: list[dict[str, Any]]) -> _Verdict:
        claimed = _claims(self.transport) | journaled_ids(self.lost.journal, self.transport)
        infos = [SandboxInfo.from_api(item) for item in listing]
        unread = []
        for fork in candidates(infos, self.lost.source_id, claimed | self.read):
            marker = read_marker(self.transport, fork, self.deadline, self.sleep)
            if marker is None:
                unread.append(fork.id)
                continue
            self.read.add(fork.id)
            if marker == self.lost.name:
                return self._destroy(fork.id)
        return _Verdict(unread=tuple(unread))

    def _destroy(self, sandbox_id: str) -> _Verdict:
        log.warning("fork %s of %s was made although its answer was lost: destroying it",
                    sandbox_id, self.lost.source_id)  # fmt: skip
        with _shield.delivered():
            destroyed = _sandbox.destroy(self.transport, sandbox_id, self.deadline)
        if destroyed:
            return _Verdict(destroyed=sandbox_id)
        return _Verdict(
            failure=CreateosCleanupError(
                f"fork {sandbox_id} of {self.lost.source_id} was made although its answer "
                "was lost, and destroying it failed: it may still be running",
                sandbox_id=sandbox_id,
                sandbox_destroyed=False,
            )
        )


def candidates(
    sandboxes: list[SandboxInfo], source_id: str, claimed: set[str]
) -> list[SandboxInfo]:
    """The live forks of ``source_id`` that nobody here claims (their ids checked)."""
    found = []
    for s in sandboxes:
        if s.forked_from == source_id and s.status not in GONE and s.id not in claimed:
            checked_id(s.id, "sandbox id in the sandbox listing")
            found.append(s)
    return found


def journaled_ids(journal: Journal | None, transport: Transport) -> set[str]:
    """The sandbox ids the lease journal records for this service (claimed by a lease)."""
    if journal is None:  # journal=False: no other lease's claims are known here
        return set()
    try:
        entries = journal.entries()
    except OSError as exc:  # the markers still decide: a claim only saves a read
        log.warning("the lease journal could not be read: %s", exc)
        return set()
    key = service_key(transport.config.base_url)
    return {
        e.sandbox_id for e in entries if e.sandbox_id is not None and service_key(e.base_url) == key
    }


def read_marker(
    transport: Transport, fork: SandboxInfo, deadline: Deadline, sleep: _retry.Sleep
) -> str | None:
    """The fork's marker (``""``: it has none, or is gone); None when it cannot be read.

    1 request (a one-shot ``printenv``), plus status polls while the fork is
    still being made. A paused fork is not read: that would mean resuming it.
    """
    try:
        with _shield.delivered():
            status = fork.status
            if status in SANDBOX_TRANSITIONAL:
                status = _sandbox.settle(transport, fork.id, deadline, sleep).status
            if status in GONE:
                return ""
            if status != "running":
                return None
            result = _api.exec_command(transport, fork.id, "printenv", [MARKER], deadline)
    except CreateosApiError as exc:
        if exc.status == 404:
            return ""  # gone meanwhile
        log.warning("could not read the marker of fork %s: %s", fork.id, exc)
        return None
    except CreateosError as exc:
        log.warning("could not read the marker of fork %s: %s", fork.id, exc)
        return None
    stdout = result.get("stdout")
    if result.get("exit_code") not in (0, 1) or not isinstance(stdout, str):
        return None  # printenv exits 1 when the variable is not set
    return stdout.strip()


def _unknown(source_id: str, why: str) -> CreateosCleanupError:
    return CreateosCleanupError(
        f"forking {source_id} may have made a sandbox, but {why}; "
        "check with `createos-sync ls` for a sandbox forked from it",
        sandbox_id=None,
        sandbox_destroyed=None,
    )


def _unsettled(source_id: str, unread: tuple[str, ...]) -> CreateosCleanupError:
    return CreateosCleanupError(
        f"forking {source_id} had an unknown outcome, and the marker of fork(s) "
        f"{', '.join(unread)} could not be read (paused, or not answering): one may be this "
        "lease's, so the lease journal keeps its entry for `createos-sync reap`; none was "
        "destroyed",
        sandbox_id=unread[0] if len(unread) == 1 else None,
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
