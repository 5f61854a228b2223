"""Sandbox lifecycle: create (recovering a lost reply by name), reach ``running``, pause, destroy.

Status changes are asynchronous in CreateOS: a 2xx to ``pause`` or
``resume`` only means "accepted". Every wait here polls the sandbox, fast at
first and then backing off, until it leaves its transitional state.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from . import _api, _retry
from ._deadline import Deadline
from ._http import Transport
from .errors import (
    CreateosApiError,
    CreateosCleanupError,
    CreateosError,
    Operation,
    SandboxUnavailable,
    may_have_taken_effect,
)
from .models import SANDBOX_TRANSITIONAL, SandboxInfo

log = logging.getLogger("createos_sync.sandbox")

RESUMABLE = frozenset({"paused", "error"})
MAX_RESUME_REQUESTS = 2


def create(
    transport: Transport,
    body: Mapping[str, Any],
    *,
    deadline: Deadline,
    cleanup_deadline: Deadline,
) -> SandboxInfo:
    """Create a sandbox; if the reply is lost, find it by its unique name and destroy it.

    The error raised after a lost reply says what is known: whether a
    sandbox was found and destroyed, or could not be checked.
    """
    name = str(body["name"])
    try:
        return SandboxInfo.from_api(_api.create_sandbox(transport, body, deadline))
    except BaseException as exc:
        if not may_have_taken_effect(exc):
            raise
        failure = _recover_lost_creation(transport, name, cleanup_deadline)
        if failure is not None:
            raise failure from exc
        if isinstance(exc, CreateosApiError):
            raise CreateosApiError(
                exc.operation,
                exc.status,
                request_id=exc.request_id,
                detail=f"the creation's outcome was unknown; no sandbox named {name} "
                "exists now (any that was created has been destroyed)",
            ) from None
        raise


def _recover_lost_creation(
    transport: Transport, name: str, deadline: Deadline
) -> CreateosCleanupError | None:
    """Destroy every sandbox named ``name``; a failure to do so is returned, not raised."""
    try:
        found = [
            s["id"]
            for s in _api.list_sandboxes(transport, deadline)
            if _api.sandbox_name(s) == name and isinstance(s.get("id"), str)
        ]
    except CreateosError as exc:
        log.error("could not look for sandbox %s after a lost creation reply: %s", name, exc)
        return CreateosCleanupError(
            f"sandbox creation may have succeeded, but no sandbox named {name} could be "
            "looked up to destroy it; check with `createos-sync ls`",
            sandbox_id=None,
            sandbox_destroyed=None,
        )
    for sandbox_id in found:
        log.warning(
            "sandbox %s (%s) was created although its reply was lost: destroying it",
            sandbox_id,
            name,
        )
        if not destroy(transport, sandbox_id, deadline):
            return CreateosCleanupError(
                f"sandbox {sandbox_id} was created although its reply was lost, and "
                "destroying it failed: it may still be running",
                sandbox_id=sandbox_id,
                sandbox_destroyed=False,
            )
    return None


def settle(
    transport: Transport, sandbox_id: str, deadline: Deadline, sleep: _retry.Sleep
) -> SandboxInfo:
    """Poll until the sandbox leaves its transitional state."""

    def read() -> SandboxInfo:
        return SandboxInfo.from_api(_api.get_sandbox(transport, sandbox_id, deadline))

    return _retry.poll(
        read,
        lambda info: info.status not in SANDBOX_TRANSITIONAL,
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
        if info.status not in RESUMABLE or resumes >= MAX_RESUME_REQUESTS:
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


def destroy(transport: Transport, sandbox_id: str, deadline: Deadline) -> bool:
    """Destroy the sandbox; True once the service confirmed it (404 included)."""
    try:
        _api.delete_sandbox(transport, sandbox_id, deadline)
    except CreateosError as exc:
        log.error("destroying sandbox %s failed: %s", sandbox_id, exc)
        return False
    log.info("destroyed sandbox %s", sandbox_id)
    return True
