"""The lease's lifecycle: open (create, fork or attach), the containment rule at close.

Request budget: ``open()`` costs one creation request (it answers once the
sandbox runs: no status poll; a fork adds its polls), plus one for the ttl watchdog;
``close()`` costs one destroy (or, for a kept or paused sandbox, one
termination of the watchdog plus the pause), plus one termination per
process still running. The ttl's own steps are in ``_ttl``.
"""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from .._sandboxes import (
    background as _background,
)
from .._sandboxes import (
    journal as _journal,
)
from .._sandboxes import (
    reap as _reap,
)
from .._sandboxes import (
    sandbox as _sandbox,
)
from .._sandboxes import (
    shield as _shield,
)
from .._sandboxes.attachments import Attachments
from .._sandboxes.box import Box
from .._sandboxes.journal import Journal
from .._sandboxes.watchdog import Watchdog
from .._wire.deadline import Deadline
from ..errors import (
    CreateosApiError,
    CreateosCleanupError,
    LeaseClosed,
    SandboxUnavailable,
    add_note,
    attach_cleanup_failure,
    is_cleanup_error,
)
from ..models import SandboxInfo
from . import _registry, _ttl
from ._closing import Containment
from ._making import Record, make
from ._options import LeaseOptions, OnExit, check_on_exit

if TYPE_CHECKING:
    from ..client import Client

log = logging.getLogger("createos_sync.lease")

L = TypeVar("L", bound="LeaseCore")


class LeaseCore(Containment):
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
        # The record that lets a crashed program's sandbox be found: off only when asked.
        self._record = Record(
            (journal if journal is not None else Journal())
            if options.journal and _journal.enabled()
            else None
        )
        self._on_exit: OnExit = options.effective_on_exit
        self._on_exit_chosen = options.on_exit is not None  # else the default (attach: keep)
        self._lock = threading.RLock()
        self._state = "new"  # new -> opening -> open -> closing -> closed
        self._closed_event = threading.Event()
        self._box: Box | None = None
        self._info: SandboxInfo | None = None  # the last record seen: set by _saw only
        self._abandoned: CreateosCleanupError | None = None
        self._lifetime: _background.Job | None = None
        self._watchdog = Watchdog(options.effective_ttl)
        self._expired = False
        self._pending_failure: CreateosCleanupError | None = None
        self._settled = False  # destroyed, or left as on_exit asked: nothing to name
        self._opened_at: float | None = None
        # disks, networks, a token: let go of at close (a made network also leaves the journal)
        self._attached = Attachments(deleted=self._record.network_deleted)

    @property
    def options(self) -> LeaseOptions:
        """The options this lease was made with."""
        return self._options

    # --- properties -------------------------------------------------------

    @property
    def id(self) -> str | None:
        """The sandbox id, once known (also ``sandbox_id``)."""
        return self._box.sandbox_id if self._box is not None else self._options.sandbox_id

    @property
    def sandbox_id(self) -> str | None:
        """The sandbox id, once known: ``id`` by the name errors and ``lease(sandbox_id=...)``
        use."""
        return self.id

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
        """Create, fork or attach to the sandbox and wait until it runs (a fork made
        ``start_paused``: until it is paused).

        If anything fails once a sandbox was created, the sandbox is destroyed
        before the error propagates; if that destroy fails too, the error is
        ``CreateosCleanupError`` naming the sandbox. The same holds for
        Ctrl-C: an interrupt during ``open()`` destroys what it created, and a
        second one that cuts that short leaves a note naming the sandbox on
        the ``KeyboardInterrupt`` (and the sandbox in the lease journal). A
        ``close()`` from another thread meanwhile wins: ``open()`` destroys
        what it created and raises ``LeaseClosed``.

        Request budget: 1 creation (it answers once the sandbox runs: no
        status poll), or 1 fork plus its status polls, or 1 read when
        attaching; plus 1 for the ttl watchdog when ``ttl`` is on (a fork
        made ``start_paused``: at its first ``resume()``); then 1 renewal per
        ``ttl / 3`` in the background while the lease is open.

        The sandbox is recorded in the lease journal before it is asked for:
        if the journal cannot be written, nothing is created (``ConfigError``)
        unless the lease was made with ``journal=False`` (or
        ``CREATEOS_SYNC_JOURNAL=off``). An attach (``sandbox_id=``) claims its
        sandbox in the journal first (no request): no reap of this machine
        destroys it while the lease holds it, and the entries of a dead owner
        (a crashed kernel) pass to this process (``_sandboxes.claims``); one a
        reap is destroying at that moment raises ``SandboxUnavailable``.

        Raises:
            LeaseClosed: the lease was already closed, or was closed meanwhile.
            ConfigError: the lease journal cannot be written.
            CreateosApiError, OperationTimeout, SandboxUnavailable: opening failed.
            CreateosCleanupError: opening failed and the sandbox could not be destroyed.
        """
        # Interrupts wait while the bookkeeping runs, and act at once during requests
        # and waits (see _shield): none can land between a sandbox and its record.
        with _shield.held():
            with self._lock:
                if self._state == "open":
                    return self
                if self._state == "opening":
                    raise LeaseClosed("this lease is being opened by another thread")
                if self._state != "new":
                    raise LeaseClosed(
                        f"this lease is closed (sandbox {self.id or 'none made'}); leases "
                        "cannot be reopened: open a new one"
                    )
                self._state = "opening"
            try:
                deadline = Deadline.after(self._command_timeout())
                info = self._obtain(deadline)
                sleep, explain = self._client.sleep, self._watchdog.explain
                box = Box(self._client._transport, info.id, sleep=sleep, explain=explain)
                if self._state == "opening":  # else close() won meanwhile: arm nothing
                    _ttl.arm(self._watchdog, box, info, deadline)  # every way of opening is here
                self._become_open(info, box)
                with _shield.delivered():
                    pass  # an interrupt held during the bookkeeping lands here, and undoes it
            except BaseException as exc:
                failure = self._abandon(exc)
                if failure is not None:
                    raise failure from exc
                raise
        return self

    def _obtain(self, deadline: Deadline) -> SandboxInfo:
        transport = self._client._transport
        if self._options.sandbox_id is not None:
            # Claimed before its first request: no sweep destroys it (issue 42).
            self._record.claim(self._options.sandbox_id, transport.config.base_url)
            with _shield.delivered():
                try:
                    return _sandbox.ensure_running(
                        transport, self._options.sandbox_id, deadline, self._client.sleep
                    )
                except CreateosApiError as exc:
                    if exc.status != 404:
                        raise
                    raise CreateosApiError(  # which sandbox, and what to do about it
                        exc.operation,
                        404,
                        request_id=exc.request_id,
                        detail=f"no sandbox {self._options.sandbox_id} to attach to (check "
                        "the id: client.sandboxes() lists those of the account)",
                        server_message=exc.server_message,
                    ) from None
        return make(self._client, self._options, self._record, deadline, self._attached)

    def _become_open(self, info: SandboxInfo, box: Box) -> None:
        with self._lock:
            if self._state != "opening":  # close() was called meanwhile: it wins
                raise LeaseClosed("the lease was closed while it was opening")
            self._saw(info)
            self._box = box
            self._state = "open"
            self._opened_at = time.monotonic()
        _registry.add(self)
        if self._record.journal is not None:  # what crashed scripts left: gone by the next run
            _reap.sweep_in_background(
                self._client, self._record.journal, spare=self._options.sandbox_id
            )
        if self._options.max_lifetime is not None:
            self._lifetime = _background.scheduler().call_later(
                self._options.max_lifetime,
                self._expire,
                name=f"max_lifetime of {info.id}",
                own_thread=True,  # closing may take long: never in the way of renewals
            )
        log.info("lease open on sandbox %s (%s)", info.id, info.status)

    def _abandon(self, exc: BaseException) -> CreateosCleanupError | None:
        """``open()`` failed: destroy what it created, close the lease; a failure to raise.

        An interrupt raised from here (it cut the destroy short) carries a note
        naming the sandbox, which the journal keeps.
        """
        sandbox_id = self._record.made_id
        try:
            if sandbox_id is None:
                if not is_cleanup_error(exc):  # nothing was created, or it was found and destroyed
                    self._forget_journal(gone=False)  # an attached sandbox is left as it was
                # else a sandbox may exist: the error says so, the journal keeps it. An
                # attached sandbox stays, but not its watchdog (it would delete it).
                failure = _ttl.stop(self._watchdog, self.id or "", "left as it was")
            else:
                self._watchdog.cancel()  # destroyed with its sandbox
                failure = self._destroy_made(sandbox_id)
            if failure is None:
                return None
            self._abandoned = failure
            if isinstance(exc, Exception):
                return failure
            attach_cleanup_failure(exc, failure)  # KeyboardInterrupt stays what it is
            return None
        finally:
            self._finish_close()

    def _destroy_made(self, sandbox_id: str) -> CreateosCleanupError | None:
        try:
            with _shield.delivered():
                destroyed = _sandbox.destroy(
                    self._client._transport, sandbox_id, self._cleanup_deadline()
                )
        except BaseException as second:
            kept = (
                "the lease journal keeps it for `createos-sync reap`"
                if self._record.journal
                else f"destroy it with `createos-sync destroy {sandbox_id}`"
            )
            attach_cleanup_failure(
                second,
                CreateosCleanupError(
                    f"interrupted while destroying sandbox {sandbox_id} after opening the lease "
                    f"failed: it may still be running ({kept})",
                    sandbox_id=sandbox_id,
                    sandbox_destroyed=None,
                ),
            )
            raise
        if destroyed:
            self._forget_journal()
            return None
        return CreateosCleanupError(
            f"opening the lease failed after sandbox {sandbox_id} was created, and "
            "destroying the sandbox failed: it may still be running",
            sandbox_id=sandbox_id,
            sandbox_destroyed=False,
        )

    def close(self, *, fresh_session: bool = False, on_exit: OnExit | None = None) -> None:
        """Terminate unfinished processes, then apply ``on_exit``; idempotent.

        No new process starts once closing begins, and every process whose
        creation was sent before is waited for and terminated. Each step
        (waiting for creations, terminating, retrying, reading, destroying)
        gets its own share of the cleanup time. If a termination stays
        unconfirmed (or a process creation was ambiguous), the sandbox is
        destroyed whatever ``on_exit`` says. A Ctrl-C during termination skips
        straight to destroying it. A ``run()`` that closing cuts short (from
        another thread) raises ``LeaseClosed``. Called while another thread
        opens the lease, ``close()`` wins: it returns once ``open()`` has
        destroyed what it created.

        Request budget: one termination per process still running, one detach
        per disk and network the lease attached (when it destroys) or one to
        disable a token it made (when it keeps or pauses: ``_sandboxes.attachments``),
        then one destroy (or a pause and its status polls); nothing for ``"keep"``.
        With a ttl, ``"keep"`` and ``"pause"`` first terminate the watchdog:
        1 request (up to 4 when that stays unconfirmed: see ``_watchdog``).

        Args:
            fresh_session: send the cleanup on a new HTTP session (the exit
                hook's choice: at interpreter exit the old one may be mid-use).
            on_exit: instead of the lease's own (decided at the end, as Harbor's
                ``stop(delete=False)`` does); containment still comes first.

        Raises:
            CreateosCleanupError: containment unconfirmed, or the sandbox could
                not be destroyed (or paused) as ``on_exit`` asked.
        """
        on_exit = check_on_exit(on_exit)
        # Interrupts wait while the bookkeeping runs, and act at once during requests and
        # waits (see _shield): whatever instant they land at, the sandbox is gone or the
        # exception that escapes names it (and its journal entry stays).
        with _shield.held():
            self._close(fresh_session, on_exit)

    def _close(self, fresh_session: bool, on_exit: OnExit | None) -> None:
        with self._lock:
            if on_exit is not None and self._state in ("opening", "open"):
                self._on_exit, self._on_exit_chosen = on_exit, True
            pending, self._pending_failure = self._pending_failure, None
            state = self._state
            if state in ("new", "closed"):
                self._finish_close()
                if pending is not None:
                    raise pending
                return
            if state == "open":
                self._state = "closing"
                if self._box is not None:
                    self._box.closing.set()
            elif state == "opening":
                self._state = "closing"  # open() sees it, and undoes itself
        if state != "open":
            with _shield.delivered():
                self._closed_event.wait()
            if state == "opening" and self._abandoned is not None:
                raise CreateosCleanupError(
                    str(self._abandoned),
                    sandbox_id=self._abandoned.sandbox_id,
                    sandbox_destroyed=self._abandoned.sandbox_destroyed,
                )
            return
        if self._lifetime is not None:
            self._lifetime.cancel()
        if fresh_session:
            self._client._transport.reset_session()
        failure: CreateosCleanupError | None = None
        try:
            failure = self._contain()
        except BaseException as exc:
            self._name_leftovers(exc)
            raise
        finally:
            self._finish_close()
        if failure is not None:
            log.error("%s", failure)
            raise failure

    def _destroy_now(self) -> None:
        """A second Ctrl-C during cleanup: destroy the sandbox at once, whatever on_exit says."""
        box = self._box
        if box is None:
            return
        box.closing.set()
        self._watchdog.cancel()
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
        self._watchdog.cancel()
        if self._lifetime is not None:
            self._lifetime.cancel()
        if self._owns_client:
            self._client.close()

    def _expire(self) -> None:
        self._expired = True
        if self._box is not None:
            self._box.table.expired = True  # a run it cuts short ends as timed out
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
            raise LeaseClosed(
                f"this lease is closed{reason} (sandbox {self.id or 'none made'}): leases "
                "cannot be reopened; open a new one (`with cs.lease() as box:`), or attach "
                "to a kept sandbox with cs.lease(sandbox_id=...)"
            )
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
        self._watchdog.verify()  # LeaseExpired if its watchdog deleted the sandbox
        return box

    def _command_timeout(self) -> float:
        return self._options.timeout or self._client._transport.config.timeout

    def _op_deadline(self) -> Deadline:
        return Deadline.after(self._command_timeout())
