"""Sandbox lifecycle: create (recovering a lost reply by name), reach ``running``, pause, destroy.

A creation is synchronous in CreateOS: ``POST /v1/sandboxes`` answers only
once the sandbox runs and its agent answers (the official TypeScript SDK
relies on it, and its answer may carry no ``status``: read as ``running``),
so its answer is not polled. Other status changes are asynchronous: a 2xx to
``pause``, ``resume`` or a fork only means "accepted". Every wait here polls the sandbox, fast at
first and then backing off, until it leaves its transitional state, or until
it reaches a state it will not come back from to serve (``error``,
``failed``, ``destroying``, ``destroyed``: ``SandboxUnavailable`` at once,
as the official SDK's waits do, rather than spinning to the deadline).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .._wire import api as _api
from .._wire import retry as _retry
from .._wire.deadline import Deadline
from .._wire.http import Transport
from .._wire.server_text import checked_id
from ..errors import (
    CreateosApiError,
    CreateosCleanupError,
    CreateosError,
    Operation,
    ProtocolError,
    SandboxUnavailable,
    attach_cleanup_failure,
    may_have_taken_effect,
    restated,
)
from ..models import SANDBOX_TRANSITIONAL, SANDBOX_UNAVAILABLE, SandboxInfo
from . import shield as _shield

log = logging.getLogger("createos_sync.sandbox")

# After a creation that got no answer at all, a search by name that finds nothing is
# repeated after these pauses: the request may still be on its way to being carried out.
LATE_LOOKS = (0.5, 1.0)
MAX_RESUME_REQUESTS = 2


def created(
    transport: Transport,
    name: str,
    request: Callable[[], Mapping[str, Any]],
    *,
    operation: str,
    cleanup_deadline: Deadline,
    sleep: _retry.Sleep = time.sleep,
    recovery: LostCreation | None = None,
    runs_when_answered: bool = False,
) -> SandboxInfo:
    """Send a request that creates a sandbox (a creation named ``name``, a fork); its result.

    ``runs_when_answered``: the request answers only once the sandbox runs (a
    creation), so an answer without a ``status`` means ``running``.

    The answer must carry a plausible id (``checked_id``). An answer without
    one, a lost answer, or an interrupt while it was awaited all leave the
    outcome unknown: what the request may have made is then found and
    destroyed before the error propagates (``recovery``; by default every
    sandbox named ``name``), and the error says so. If that cannot be done,
    the error is (or, for an interrupt, carries) a ``CreateosCleanupError``:
    a sandbox may exist. When no answer came at all, the request may still
    be on its way to being carried out: a search that finds nothing is
    repeated after a pause, twice (``late_looks``).

    Request budget on an unknown outcome (by name): one listing (three when
    no answer came and nothing is found), plus one destroy per sandbox found.

    Interrupts are held but while requests wait (``_shield``): call this
    within ``_shield.held()`` and record the id before leaving it, so that
    no interrupt can land between the answer and its record.
    """
    recovery = recovery if recovery is not None else ByName(transport, name)
    with _shield.held():
        try:
            record = recovery.attempt(request)
            checked_id(record.get("id"), f"sandbox id in the answer to {operation}")
        except BaseException as exc:
            if not may_have_taken_effect(exc):
                raise
            _recover_or_raise(recovery, exc, cleanup_deadline, sleep)
            explained = recovery.explained(exc)
            if explained is exc:
                raise
            raise explained from None
        if runs_when_answered and record.get("status") is None:
            record = {**record, "status": "running"}
        return SandboxInfo.from_api(record)


class LostCreation(Protocol):
    """How ``created`` sends its request, and finds what a request of unknown outcome made."""

    def attempt(self, request: Callable[[], Mapping[str, Any]]) -> Mapping[str, Any]:
        """Send the request (held: wrap its wait in ``_shield.delivered()``)."""

    def recover(
        self, exc: BaseException, deadline: Deadline, sleep: _retry.Sleep
    ) -> CreateosCleanupError | None:
        """Destroy what the request may have made; a failure to do so is returned."""

    def explained(self, exc: BaseException) -> BaseException:
        """The error to raise once nothing the request may have made is left."""

    def interrupted(self) -> CreateosCleanupError:
        """What is known when the search was interrupted (attached to the interrupt)."""


def late_looks(exc: BaseException) -> tuple[float, ...]:
    """The pauses after which a search that found nothing looks again: none once answered."""
    answered = isinstance(exc, ProtocolError) or (
        isinstance(exc, CreateosApiError) and exc.status is not None
    )
    return () if answered else LATE_LOOKS


class ByName:
    """A creation's recovery: the sandbox it may have made carries its unique name."""

    def __init__(self, transport: Transport, name: str) -> None:
        self.transport = transport
        self.name = name

    def attempt(self, request: Callable[[], Mapping[str, Any]]) -> Mapping[str, Any]:
        with _shield.delivered():
            return request()

    def recover(
        self, exc: BaseException, deadline: Deadline, sleep: _retry.Sleep
    ) -> CreateosCleanupError | None:
        return _recover_lost_creation(self.transport, self.name, deadline, late_looks(exc), sleep)

    def explained(self, exc: BaseException) -> BaseException:
        gone = (
            f"the creation's outcome was unknown; no sandbox named {self.name} exists now "
            "(any that was created has been destroyed)"
        )
        return restated(exc, gone)

    def interrupted(self) -> CreateosCleanupError:
        return CreateosCleanupError(
            f"sandbox creation may have succeeded, and looking for sandbox {self.name} was "
            "interrupted: it may be running (`createos-sync reap` finds it by that name "
            "in the lease journal; `createos-sync ls` shows it)",
            sandbox_id=None,
            sandbox_destroyed=None,
        )


def _recover_or_raise(
    recovery: LostCreation, exc: BaseException, deadline: Deadline, sleep: _retry.Sleep
) -> None:
    """Destroy what the creation may have made; raise if that cannot be confirmed."""
    try:
        failure = recovery.recover(exc, deadline, sleep)
    except BaseException as second:  # interrupted while looking: nothing is known
        attach_cleanup_failure(second, recovery.interrupted())
        raise
    if failure is None:
        return
    if isinstance(exc, Exception):
        raise failure from exc
    attach_cleanup_failure(exc, failure)  # an interrupt stays what it is, with the note
    raise exc


def _recover_lost_creation(
    transport: Transport,
    name: str,
    deadline: Deadline,
    pauses: tuple[float, ...],
    sleep: _retry.Sleep,
) -> CreateosCleanupError | None:
    """Destroy every sandbox named ``name``; a failure to do so is returned, not raised.

    If none is found, look again after each of ``pauses``.
    """
    try:
        found = _named(transport, name, deadline)
        for pause in pauses:
            if found:
                break
            with _shield.delivered():
                sleep(pause)
            found = _named(transport, name, deadline)
    except CreateosError as exc:
        log.error("could not look for sandbox %s after a lost creation reply: %s", name, exc)
        return CreateosCleanupError(
            f"sandbox creation may have succeeded, but no sandbox named {name} could be "
            "looked up to destroy it; check with `createos-sync ls`",
            sandbox_id=None,
            sandbox_destroyed=None,
        )
    for raw_id in found:
        try:
            sandbox_id = checked_id(raw_id, "sandbox id in the sandbox listing")
        except ProtocolError:
            return CreateosCleanupError(
                f"a sandbox named {name} exists, but the service gives no usable id for it, "
                "so it cannot be destroyed from here; check with `createos-sync ls`",
                sandbox_id=None,
                sandbox_destroyed=False,
            )
        log.warning(
            "sandbox %s (%s) was created although its reply was lost: destroying it",
            sandbox_id,
            name,
        )
        with _shield.delivered():
            destroyed = destroy(transport, sandbox_id, deadline)
        if not destroyed:
            return CreateosCleanupError(
                f"sandbox {sandbox_id} ({name}) was created although its reply was lost, and "
                "destroying it failed: it may still be running",
                sandbox_id=sandbox_id,
                sandbox_destroyed=False,
            )
    return None


def _named(transport: Transport, name: str, deadline: Deadline) -> list[object]:
    """The ids (unchecked) of every sandbox named ``name``."""
    with _shield.delivered():
        return [
            s.get("id")
            for s in _api.list_sandboxes(transport, deadline)
            if _api.sandbox_name(s) == name
        ]


def settle(
    transport: Transport, sandbox_id: str, deadline: Deadline, sleep: _retry.Sleep
) -> SandboxInfo:
    """Poll until the sandbox leaves its transitional state."""

    def read() -> SandboxInfo:
        return SandboxInfo.from_api(_api.get_sandbox(transport, sandbox_id, deadline))

    return _retry.poll(
        read,
        lambda info: info.status not in SANDBOX_TRANSITIONAL or info.status in SANDBOX_UNAVAILABLE,
        deadline=deadline,
        operation=Operation.SANDBOX_LIFECYCLE,
        sleep=sleep,
    )


def ensure_running(
    transport: Transport,
    sandbox_id: str,
    deadline: Deadline,
    sleep: _retry.Sleep,
    info: SandboxInfo | None = None,
) -> SandboxInfo:
    """Wait until the sandbox runs, resuming it if it is paused; raise if it cannot run."""
    resumes = 0
    while True:
        if info is None or info.status in SANDBOX_TRANSITIONAL:
            if info is not None:
                # ``info`` was just read (the creation's answer): a poll at once would only
                # read it again, a request and a round trip for nothing.
                sleep(_retry.POLL_FIRST)
            info = settle(transport, sandbox_id, deadline, sleep)
        if info.status == "running":
            return info
        if info.status != "paused" or resumes >= MAX_RESUME_REQUESTS:
            raise SandboxUnavailable(sandbox_id, info.status, "it cannot be brought to running")
        log.info("resuming sandbox %s (%s)", sandbox_id, info.status)
        _api.request_transition(transport, sandbox_id, "resume", deadline)
        resumes += 1
        info = None


def pause(
    transport: Transport, sandbox_id: str, deadline: Deadline, sleep: _retry.Sleep
) -> SandboxInfo:
    """Pause the sandbox and wait until it is paused (409 = already under way: reconcile)."""
    _api.request_transition(transport, sandbox_id, "pause", deadline)
    info = settle(transport, sandbox_id, deadline, sleep)
    if info.status != "paused":
        raise SandboxUnavailable(sandbox_id, info.status, "it did not pause")
    return info


def raise_if_unavailable(
    transport: Transport,
    sandbox_id: str,
    deadline: Deadline,
    detail: str,
    explain: Callable[[SandboxUnavailable], SandboxUnavailable],
) -> None:
    """Read the sandbox (1 request): ``SandboxUnavailable`` if it will not serve again.

    Asked when something looks like the sandbox died under a command (a
    stream ended without an exit frame, a creation refused with 409). A
    failure to read it says nothing: the caller goes on with its own error.
    What is raised goes through ``explain`` (``Box.explain``: a lease whose
    ttl could have run out says ``LeaseExpired``).
    """
    try:
        info = SandboxInfo.from_api(_api.get_sandbox(transport, sandbox_id, deadline))
    except CreateosApiError as exc:
        if exc.status != 404:
            log.debug("could not read sandbox %s: %s", sandbox_id, exc)
            return
        gone = f"the service no longer knows it; {detail}"
        raise explain(SandboxUnavailable(sandbox_id, "destroyed", gone)) from None
    except CreateosError as exc:
        log.debug("could not read sandbox %s: %s", sandbox_id, exc)
        return
    if info.status in SANDBOX_UNAVAILABLE:
        raise explain(SandboxUnavailable(sandbox_id, info.status, detail))


def destroy(transport: Transport, sandbox_id: str, deadline: Deadline) -> bool:
    """Destroy the sandbox; True once the service confirmed it (404 included)."""
    try:
        _api.delete_sandbox(transport, sandbox_id, deadline)
    except CreateosError as exc:
        log.error("destroying sandbox %s failed: %s", sandbox_id, exc)
        return False
    log.info("destroyed sandbox %s", sandbox_id)
    return True
