"""The lease's lifecycle: open (create, fork or attach), the containment rule at close.

Request budget: ``open()`` costs one creation request plus status polls
(none when the sandbox is already running); ``close()`` costs one destroy,
plus one termination per process still running.
"""

from __future__ import annotations

import html
import logging
import secrets
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from .. import _fork, _registry, _sandbox
from .._box import Box
from .._containment import terminate_unfinished
from .._deadline import Deadline
from .._journal import Entry, Journal
from .._options import LeaseOptions, OnExit
from ..errors import (
    CreateosCleanupError,
    CreateosError,
    LeaseClosed,
    SandboxUnavailable,
    add_note,
    attach_cleanup_failure,
)
from ..models import SandboxInfo

if TYPE_CHECKING:
    from ..client import Client

log = logging.getLogger("createos_sync.lease")

L = TypeVar("L", bound="LeaseCore")


class LeaseCore:
    """Owns one sandbox from ``open()`` to ``close()``; the capability mixins build on it."""

    def __init__(
        self,
        client: Client,
        options: LeaseOptions,
        *,
        owns_client: bool = False,
        journal: Journal | None = None,
    ) -> None:
        self._client = client
        self._options = options
        self._owns_client = owns_client
        self._journal = journal if journal is not None else Journal()
        self._on_exit: OnExit = options.effective_on_exit
        self._lock = threading.RLock()
        self._state = "new"  # new -> opening -> open -> closing -> closed
        self._closed_event = threading.Event()
        self._box: Box | None = None
        self._info: SandboxInfo | None = None
        self._journal_name: str | None = None
        self._timer: threading.Timer | None = None
        self._expired = False
        self._pending_failure: CreateosCleanupError | None = None
        self._opened_at: float | None = None

    @property
    def options(self) -> LeaseOptions:
        """The options this lease was made with."""
        return self._options

    # --- properties -------------------------------------------------------

    @property
    def id(self) -> str | None:
        """The sandbox id, once known."""
        return self._box.sandbox_id if self._box is not None else self._options.sandbox_id

    @property
    def status(self) -> str | None:
        """The sandbox status last observed (``info()`` reads it afresh)."""
        if self._state == "closed":
            return "closed"
        return self._info.status if self._info is not None else None

    @property
    def closed(self) -> bool:
        return self._state == "closed"

    @property
    def client(self) -> Client:
        return self._client

    # --- open / close -----------------------------------------------------

    def open(self: L) -> L:
        """Create (or attach to) the sandbox and wait until it runs.

        If anything fails once a sandbox was created, the sandbox is destroyed
        before the error propagates; if that destroy fails too, the error is
        ``CreateosCleanupError`` naming the sandbox.

        Raises:
            LeaseClosed: the lease was already closed.
            CreateosApiError, OperationTimeout, SandboxUnavailable: opening failed.
            CreateosCleanupError: opening failed and the sandbox could not be destroyed.
        """
        with self._lock:
            if self._state == "open":
                return self
            if self._state != "new":
                raise LeaseClosed("this lease is closed; leases cannot be reopened")
            self._state = "opening"
        transport = self._client.transport
        deadline = Deadline.after(self._command_timeout())
        try:
            if self._options.sandbox_id is not None:
                info = _sandbox.ensure_running(
                    transport, self._options.sandbox_id, deadline, self._client.sleep
                )
            else:  # a creation or a fork: the same journal and cleanup rules
                info = self._create(deadline)
        except BaseException:
            self._finish_close()
            raise
        with self._lock:
            self._info = info
            self._box = Box(transport, info.id, sleep=self._client.sleep)
            self._state = "open"
            self._opened_at = time.monotonic()
        _registry.add(self)
        if self._options.max_lifetime is not None:
            self._timer = threading.Timer(self._options.max_lifetime, self._expire)
            self._timer.daemon = True
            self._timer.start()
        log.info("lease open on sandbox %s (%s)", info.id, info.status)
        return self

    def _create(self, deadline: Deadline) -> SandboxInfo:
        transport = self._client.transport
        token = secrets.token_hex(6)
        prefix = self._options.name or "createos-sync"
        name = f"{prefix}-{token}"
        source = self._options.fork_from
        self._journal.add(Entry(name=name, base_url=transport.config.base_url, fork_from=source))
        self._journal_name = name
        try:
            info = self._request_sandbox(name, deadline)
        except CreateosCleanupError:
            raise  # a sandbox may exist: the journal entry stays for `createos-sync reap`
        except BaseException:
            self._forget_journal()  # refused, or found and destroyed: nothing is left
            raise
        self._journal.set_sandbox(name, info.id)
        log.info("created sandbox %s (%s)", info.id, name)
        try:
            if self._options.start_paused:
                return _fork.settle_paused(transport, info, deadline, self._client.sleep)
            return _sandbox.ensure_running(transport, info.id, deadline, self._client.sleep, info)
        except BaseException as exc:
            if _sandbox.destroy(transport, info.id, self._cleanup_deadline()):
                self._journal.remove(name)
                raise
            failure = CreateosCleanupError(
                f"opening the lease failed after sandbox {info.id} was created, and "
                "destroying the sandbox failed: it may still be running",
                sandbox_id=info.id,
                sandbox_destroyed=False,
            )
            if not isinstance(exc, Exception):  # KeyboardInterrupt stays what it is
                attach_cleanup_failure(exc, failure)
                raise
            raise failure from exc

    def _request_sandbox(self, name: str, deadline: Deadline) -> SandboxInfo:
        """Ask for a new sandbox, or for a fork (``_fork``); each recovers a lost answer."""
        transport, cleanup = self._client.transport, self._cleanup_deadline()
        source = self._options.fork_from
        if source is None:
            body = {**self._options.creation_body(), "name": name}
            return _sandbox.create(transport, body, deadline=deadline, cleanup_deadline=cleanup)
        return _fork.fork(
            transport,
            source,
            self._options.fork_body(),
            name=name,
            journal=self._journal,
            deadline=deadline,
            cleanup_deadline=cleanup,
            sleep=self._client.sleep,
        )

    def close(self, *, fresh_session: bool = False) -> None:
        """Terminate unfinished processes, then apply ``on_exit``; idempotent.

        Processes are terminated under a fresh deadline, each unconfirmed one
        retried once and then read. If any stays unconfirmed (or a process
        creation was ambiguous), the sandbox is destroyed whatever ``on_exit``
        says. A Ctrl-C during termination skips straight to destroying it.

        Raises:
            CreateosCleanupError: containment unconfirmed, or the sandbox could
                not be destroyed (or paused) as ``on_exit`` asked.
        """
        with self._lock:
            pending, self._pending_failure = self._pending_failure, None
            if self._state in ("new", "closed"):
                self._finish_close()
                if pending is not None:
                    raise pending
                return
            if self._state == "closing":
                wait_for_other = True
            else:
                wait_for_other = False
                self._state = "closing"
                if self._box is not None:
                    self._box.closing.set()
        if wait_for_other:
            self._closed_event.wait()
            return
        if self._timer is not None:
            self._timer.cancel()
        if fresh_session:
            self._client.transport.reset_session()
        failure: CreateosCleanupError | None = None
        try:
            failure = self._contain()
        finally:
            self._finish_close()
        if failure is not None:
            log.error("%s", failure)
            raise failure

    def _contain(self) -> CreateosCleanupError | None:
        box = self._box
        if box is None:
            return None
        deadline = self._cleanup_deadline()
        try:
            terminate_unfinished(box.transport, box.sandbox_id, box.table, deadline)
        except KeyboardInterrupt:
            log.warning(
                "interrupted while terminating processes: destroying sandbox %s", box.sandbox_id
            )
            if _sandbox.destroy(box.transport, box.sandbox_id, self._cleanup_deadline()):
                self._forget_journal()
            raise
        deadline = self._cleanup_deadline()  # terminations must not eat the destroy's time
        if box.table.poisoned:
            return self._destroy_poisoned(box, deadline)
        if self._on_exit == "destroy":
            if not _sandbox.destroy(box.transport, box.sandbox_id, deadline):
                return CreateosCleanupError(
                    f"sandbox {box.sandbox_id} could not be destroyed: it may still be running "
                    f"(retry with `createos-sync destroy {box.sandbox_id}`)",
                    sandbox_id=box.sandbox_id,
                    sandbox_destroyed=False,
                )
            self._info = None
        elif self._on_exit == "pause":
            try:
                self._info = _sandbox.pause(
                    box.transport, box.sandbox_id, deadline, self._client.sleep
                )
            except CreateosError as exc:
                return CreateosCleanupError(
                    f"sandbox {box.sandbox_id} could not be paused ({exc}): it is still running",
                    sandbox_id=box.sandbox_id,
                    sandbox_destroyed=None,
                )
        self._forget_journal()
        return None

    def _destroy_poisoned(self, box: Box, deadline: Deadline) -> CreateosCleanupError:
        why, suspects = box.table.why_poisoned(), box.table.unconfirmed_ids
        destroyed = _sandbox.destroy(box.transport, box.sandbox_id, deadline)
        if destroyed:
            self._forget_journal()
            outcome = f"sandbox {box.sandbox_id} was destroyed instead"
        else:
            outcome = (
                f"destroying sandbox {box.sandbox_id} failed too: it may still be running "
                f"(retry with `createos-sync destroy {box.sandbox_id}`)"
            )
        return CreateosCleanupError(
            f"containment unconfirmed: {why}; {outcome}",
            sandbox_id=box.sandbox_id,
            process_ids=suspects,
            sandbox_destroyed=destroyed,
        )

    def _destroy_now(self) -> None:
        """A second Ctrl-C during cleanup: destroy the sandbox at once, whatever on_exit says."""
        box = self._box
        if box is None:
            return
        box.closing.set()
        if _sandbox.destroy(box.transport, box.sandbox_id, self._cleanup_deadline()):
            log.warning("destroyed sandbox %s after a second interrupt", box.sandbox_id)
            self._forget_journal()
            self._finish_close()
        else:
            box.table.ambiguous_creation()  # poisoned: close() will try the destroy again
            log.error("sandbox %s may still be running: its destroy failed", box.sandbox_id)

    def _finish_close(self) -> None:
        with self._lock:
            self._state = "closed"
            self._closed_event.set()
        _registry.discard(self)
        if self._timer is not None:
            self._timer.cancel()
        if self._owns_client:
            self._client.close()

    def _forget_journal(self) -> None:
        if self._journal_name is not None:
            self._journal.remove(self._journal_name)
            self._journal_name = None

    def _expire(self) -> None:
        self._expired = True
        log.warning(
            "lease %s reached its max_lifetime of %g s: closing it",
            self.id,
            self._options.max_lifetime,
        )
        try:
            self.close()
        except CreateosCleanupError as exc:
            with self._lock:
                self._pending_failure = exc  # the next close() raises it

    def _cleanup_deadline(self) -> Deadline:
        return Deadline.after(self._client.transport.config.cleanup_timeout)

    def __enter__(self: L) -> L:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except CreateosCleanupError as failure:
            attach_cleanup_failure(exc, failure)
            log.error("cleanup failed while %s propagated: %s", type(exc).__name__, failure)
        except Exception as other:
            add_note(exc, f"closing the lease also failed: {type(other).__name__}: {other}")
            log.error("closing the lease failed while %s propagated: %s", type(exc).__name__, other)

    # --- what the capability mixins use ------------------------------------

    def _usable_box(self, *, paused_ok: bool = False) -> Box:
        """The open sandbox; a paused one only when ``paused_ok`` (commands and files need
        it running: they raise ``SandboxUnavailable`` saying ``resume()`` first)."""
        with self._lock:
            state, box, info = self._state, self._box, self._info
        if state in ("new", "opening"):
            raise LeaseClosed(
                "this lease is not open: use `with cs.lease() as box:` or call open()"
            )
        if state != "open" or box is None:
            reason = (
                f" (its max_lifetime of {self._options.max_lifetime:g} s was reached)"
                if self._expired and self._options.max_lifetime is not None
                else ""
            )
            raise LeaseClosed(f"this lease is closed{reason}")
        if box.table.poisoned:
            suspects = ", ".join(box.table.unconfirmed_ids) or "(unknown)"
            raise CreateosCleanupError(
                f"this lease is poisoned: process {suspects} "
                f"may still be running; close() will destroy sandbox {box.sandbox_id}",
                sandbox_id=box.sandbox_id,
                process_ids=box.table.unconfirmed_ids,
            )
        if not paused_ok and info is not None and info.status == "paused":
            raise SandboxUnavailable(
                box.sandbox_id, "paused", "call resume() first (paused, or forked start_paused)"
            )
        return box

    def _command_timeout(self) -> float:
        return self._options.timeout or self._client.transport.config.timeout

    def _op_deadline(self) -> Deadline:
        return Deadline.after(self._command_timeout())

    # --- display ----------------------------------------------------------

    def __repr__(self) -> str:
        running = len(self._box.table.unfinished()) if self._box is not None else 0
        return (
            f"<Lease {self.id or '(no sandbox yet)'} status={self.status} "
            f"on_exit={self._on_exit} processes={running}>"
        )

    def _repr_html_(self) -> str:
        age = f"{time.monotonic() - self._opened_at:.0f}s" if self._opened_at else "-"
        running = len(self._box.table.unfinished()) if self._box is not None else 0
        rows = [
            ("sandbox", self.id or "-"),
            ("status", self.status or "-"),
            ("age", age),
            ("on exit", self._on_exit),
            ("running processes", str(running)),
        ]
        cells = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
            for k, v in rows
        )
        return f"<table><caption>CreateOS lease</caption>{cells}</table>"


