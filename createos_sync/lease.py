"""``Lease``: one sandbox, owned from ``open()`` to ``close()``, never leaked.

Request budget: ``open()`` costs one creation request plus status polls
(none when the sandbox is already running); ``close()`` costs one destroy,
plus one termination per process still running. ``run()`` costs three
requests (see ``createos_sync.process``).
"""

from __future__ import annotations

import html
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from . import _api, _registry, _sandbox, files, process
from ._box import Box
from ._command import Command, validate_env
from ._containment import terminate_unfinished
from ._deadline import Deadline
from ._journal import Entry, Journal
from ._output import Capture, fan_out
from ._output import echo as echo_output
from .errors import (
    CreateosCleanupError,
    CreateosError,
    LeaseClosed,
    add_note,
    attach_cleanup_failure,
)
from .models import SandboxInfo
from .result import RunResult

if TYPE_CHECKING:
    import os

    from .client import Client

log = logging.getLogger("createos_sync.lease")

OnExit = Literal["destroy", "keep", "pause"]
ON_EXIT_CHOICES = ("destroy", "keep", "pause")
DEFAULT_MAX_OUTPUT = 4 * 1024 * 1024


class Lease:
    """A context manager owning one sandbox; see ``createos_sync.lease()``."""

    def __init__(
        self,
        client: Client,
        *,
        shape: str,
        rootfs: str | None = None,
        region: str | None = None,
        name: str | None = None,
        egress: Sequence[Mapping[str, Any]] | None = None,
        env: Mapping[str, str] | None = None,
        auto_pause_after: int | None = None,
        max_lifetime: float | None = None,
        sandbox_id: str | None = None,
        on_exit: OnExit | None = None,
        timeout: float | None = None,
        owns_client: bool = False,
        journal: Journal | None = None,
    ) -> None:
        if on_exit is not None and on_exit not in ON_EXIT_CHOICES:
            raise ValueError(f"on_exit must be one of {', '.join(ON_EXIT_CHOICES)}")
        if not isinstance(shape, str) or not shape:
            raise ValueError("shape must be a non-empty str")
        if sandbox_id is not None and (not isinstance(sandbox_id, str) or not sandbox_id):
            raise ValueError("sandbox_id must be a non-empty str")
        if auto_pause_after is not None and not (
            isinstance(auto_pause_after, int) and 60 <= auto_pause_after <= 86400
        ):
            raise ValueError("auto_pause_after must be an int of seconds in 60..86400")
        self._max_lifetime = _seconds_or_none("max_lifetime", max_lifetime)
        self._timeout = _seconds_or_none("timeout", timeout)
        self._client = client
        self._owns_client = owns_client
        self._journal = journal if journal is not None else Journal()
        self._attach_id = sandbox_id
        self._on_exit: OnExit = on_exit or ("keep" if sandbox_id else "destroy")
        self._name_prefix = name
        self._creation = {
            "shape": shape,
            "rootfs": rootfs,
            "region": region,
            "egress": egress,
            "envs": validate_env(env),
            "auto_pause_after_seconds": auto_pause_after,
        }
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

    # --- properties -------------------------------------------------------

    @property
    def id(self) -> str | None:
        """The sandbox id, once known."""
        return self._box.sandbox_id if self._box is not None else self._attach_id

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

    def open(self) -> Lease:
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
        deadline = Deadline.after(self._timeout or transport.config.timeout)
        try:
            if self._attach_id is not None:
                info = _sandbox.ensure_running(
                    transport, self._attach_id, deadline, self._client.sleep
                )
            else:
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
        if self._max_lifetime is not None:
            self._timer = threading.Timer(self._max_lifetime, self._expire)
            self._timer.daemon = True
            self._timer.start()
        log.info("lease open on sandbox %s (%s)", info.id, info.status)
        return self

    def _create(self, deadline: Deadline) -> SandboxInfo:
        transport = self._client.transport
        token = secrets.token_hex(6)
        name = f"{self._name_prefix}-{token}" if self._name_prefix else f"createos-sync-{token}"
        body = {k: v for k, v in self._creation.items() if v not in (None, {}, [])}
        body["name"] = name
        self._journal.add(Entry(name=name, base_url=transport.config.base_url))
        self._journal_name = name
        try:
            info = _sandbox.create(
                transport, body, deadline=deadline, cleanup_deadline=self._cleanup_deadline()
            )
        except CreateosCleanupError:
            raise  # a sandbox may exist: the journal entry stays for `createos-sync reap`
        except BaseException:
            self._forget_journal()  # refused, or found and destroyed: nothing is left
            raise
        self._journal.set_sandbox(name, info.id)
        log.info("created sandbox %s (%s)", info.id, name)
        try:
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
            "lease %s reached its max_lifetime of %g s: closing it", self.id, self._max_lifetime
        )
        try:
            self.close()
        except CreateosCleanupError as exc:
            with self._lock:
                self._pending_failure = exc  # the next close() raises it

    def _cleanup_deadline(self) -> Deadline:
        return Deadline.after(self._client.transport.config.cleanup_timeout)

    def __enter__(self) -> Lease:
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

    # --- commands ----------------------------------------------------------

    def run(
        self,
        cmd: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: process.StdinData | None = None,
        timeout: float | None = None,
        check: bool = False,
        on_output: Callable[[str, str], None] | None = None,
        echo: bool = False,
        max_output: int = DEFAULT_MAX_OUTPUT,
    ) -> RunResult:
        """Run a command to completion in the sandbox and return its ``RunResult``.

        A ``str`` runs as a bash script (``bash -lc``); a sequence runs as argv,
        each item quoted. The process waits at a start gate until its output
        stream is attached, so nothing it writes is lost. On timeout the
        process tree is terminated and the result has ``timed_out=True``.
        Ctrl-C terminates the process tree, then re-raises; a second Ctrl-C
        meanwhile destroys the sandbox.

        Request budget: 3 (create, output stream, start-gate release), plus 1
        upload when ``stdin`` is given, plus reconnections of a dropped stream.

        Raises:
            ValueError, TypeError: invalid arguments, before any request.
            CommandFailed, CommandTimeout: with ``check=True``.
            OutputLostError: output was evicted before it could be read.
            CreateosCleanupError: the lease is poisoned by an unconfirmed cleanup.
            LeaseClosed: the lease is not open.
        """
        command = Command.parse(cmd, cwd=cwd, env=env)
        process.validate_stdin(stdin)
        _check_output_options(max_output, on_output)
        limit = _seconds_or_none("timeout", timeout) or self._command_timeout()
        box = self._usable_box()
        capture = Capture(max_output)
        deliver = fan_out(capture.write, on_output, echo_output if echo else None)
        result = process.run(
            box,
            command,
            stdin=stdin,
            timeout=limit,
            capture=capture,
            deliver=deliver,
            escalate=self._destroy_now,
        )
        return result.check() if check else result

    def start(
        self,
        cmd: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: process.StdinData | None = None,
        on_output: Callable[[str, str], None] | None = None,
        echo: bool = False,
        max_output: int = DEFAULT_MAX_OUTPUT,
    ) -> process.Process:
        """Start a command in the background and return its ``Process``.

        Without ``stdin`` the process's stdin stays open for ``send()`` until
        ``close_stdin()``. Returns once the output stream is attached and the
        command released. Request budget: 3, like ``run()``.
        """
        command = Command.parse(cmd, cwd=cwd, env=env)
        process.validate_stdin(stdin)
        _check_output_options(max_output, on_output)
        return process.start(
            self._usable_box(),
            command,
            stdin=stdin,
            max_output=max_output,
            on_output=on_output,
            echo=echo_output if echo else None,
        )

    def process(
        self,
        process_id: str,
        *,
        on_output: Callable[[str, str], None] | None = None,
        echo: bool = False,
        max_output: int = DEFAULT_MAX_OUTPUT,
    ) -> process.Process:
        """Reattach to a process of this sandbox by id (after a kernel restart, say).

        Its output is replayed from whatever the journal still holds. If it is
        still running, it is terminated when this lease closes.
        """
        if not isinstance(process_id, str) or not process_id:
            raise ValueError("process_id must be a non-empty str")
        _check_output_options(max_output, on_output)
        return process.reattach(
            self._usable_box(),
            process_id,
            max_output=max_output,
            on_output=on_output,
            echo=echo_output if echo else None,
        )

    def _command_timeout(self) -> float:
        return self._timeout or self._client.transport.config.timeout

    def _usable_box(self) -> Box:
        with self._lock:
            state, box = self._state, self._box
        if state in ("new", "opening"):
            raise LeaseClosed(
                "this lease is not open: use `with cs.lease() as box:` or call open()"
            )
        if state != "open" or box is None:
            reason = (
                f" (its max_lifetime of {self._max_lifetime:g} s was reached)"
                if self._expired
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
        return box

    # --- sandbox state ----------------------------------------------------

    def info(self) -> SandboxInfo:
        """Read the sandbox afresh (1 request)."""
        box = self._usable_box()
        info = SandboxInfo.from_api(_api.get_sandbox(box.transport, box.sandbox_id, box.deadline()))
        self._info = info
        return info

    def pause(self) -> SandboxInfo:
        """Pause the sandbox and wait until it is paused; files and processes are kept."""
        box = self._usable_box()
        self._info = _sandbox.pause(box.transport, box.sandbox_id, self._op_deadline(), box.sleep)
        return self._info

    def resume(self) -> SandboxInfo:
        """Resume the sandbox and wait until it runs again."""
        box = self._usable_box()
        self._info = _sandbox.ensure_running(
            box.transport, box.sandbox_id, self._op_deadline(), box.sleep
        )
        return self._info

    def _op_deadline(self) -> Deadline:
        return Deadline.after(self._command_timeout())

    # --- files ------------------------------------------------------------

    def write_file(
        self, path: str, data: files.FileData, *, progress: files.Progress | None = None
    ) -> None:
        """Write ``data`` (bytes, str, or a binary file object, streamed) to the remote ``path``.

        Request budget: 1 PUT. Bytes, str and seekable files are retried after
        a 5xx or a lost answer (rewinding the file); a stream that cannot be
        rewound is sent once. ``progress(done_bytes, total_bytes)`` is called
        as bytes go out (at most ten times a second, plus a first and a final
        call); ``total_bytes`` is None for a stream of unknown size.
        """
        files.check_remote_path(path)
        files.check_data(data)
        files.check_progress(progress)
        files.write(self._usable_box(), path, data, self._op_deadline(), files.Meter(progress))

    def read_file(self, path: str) -> bytes:
        """Read a whole remote file into memory. Request budget: 1 GET."""
        files.check_remote_path(path)
        return files.read(self._usable_box(), path, self._op_deadline())

    def upload(
        self,
        local_path: str | os.PathLike[str],
        remote_path: str,
        *,
        progress: files.Progress | None = None,
    ) -> None:
        """Stream a local file to ``remote_path``, retried like ``write_file``.

        Request budget: 1 PUT. ``progress`` as in ``write_file``.
        """
        files.check_remote_path(remote_path)
        files.check_progress(progress)
        files.upload(
            self._usable_box(), local_path, remote_path, self._op_deadline(), files.Meter(progress)
        )

    def download(
        self,
        remote_path: str,
        local_path: str | os.PathLike[str],
        *,
        progress: files.Progress | None = None,
    ) -> None:
        """Stream ``remote_path`` to a temporary file beside ``local_path``, then rename it
        into place; nothing is left behind on failure (Ctrl-C included).

        Request budget: 1 GET (a stream that breaks midway starts again).
        ``progress`` as in ``write_file``; ``total_bytes`` is the announced size.
        """
        files.check_remote_path(remote_path)
        files.check_progress(progress)
        files.download(
            self._usable_box(), remote_path, local_path, self._op_deadline(), files.Meter(progress)
        )

    def upload_dir(
        self,
        local_dir: str | os.PathLike[str],
        remote_dir: str,
        *,
        progress: files.Progress | None = None,
    ) -> None:
        """Copy the tree under ``local_dir`` into ``remote_dir`` (created if missing; files
        already there with the same names are replaced).

        The tree is packed into a local temporary tar (symlinks stored as
        symlinks, never followed; sockets, FIFOs and devices skipped), sent
        to a scratch file in the sandbox's /tmp, and extracted there by
        ``tar``, which then removes the scratch file. ``progress`` counts the
        archive's bytes.

        Request budget: 4 (1 PUT, then a 3-request run), plus 1 exec that
        removes the scratch file if anything fails.

        Raises:
            NotADirectoryError: ``local_dir`` is not a directory (before any request).
            CommandFailed: ``tar`` failed in the sandbox (``.result`` has its stderr).
        """
        files.check_remote_path(remote_dir)
        files.check_progress(progress)
        files.upload_dir(
            self._usable_box(),
            local_dir,
            remote_dir,
            self._op_deadline(),
            self._housekeeping_run,
            files.Meter(progress),
        )

    def download_dir(
        self,
        remote_dir: str,
        local_dir: str | os.PathLike[str],
        *,
        progress: files.Progress | None = None,
    ) -> None:
        """Copy the tree under ``remote_dir`` to the new directory ``local_dir``.

        ``local_dir`` must not exist, or be an empty directory: the tree is
        extracted beside it and renamed into place, so a failure leaves
        nothing behind. ``tar`` archives the tree into a scratch file in the
        sandbox's /tmp; it is downloaded, removed from the sandbox, and every
        entry is checked before anything is extracted (see
        ``UnsafeArchiveError``). Devices and FIFOs are refused, and so are
        symlinks that lead outside the tree (absolute ones included).
        ``progress`` counts the archive's bytes.

        Request budget: 5 (a 3-request run, 1 GET, 1 exec that removes the
        scratch file).

        Raises:
            FileExistsError: ``local_dir`` is not an empty directory (before any request).
            UnsafeArchiveError: the archive was refused; nothing was extracted.
            CommandFailed: ``tar`` failed in the sandbox (``.result`` has its stderr).
        """
        files.check_remote_path(remote_dir)
        files.check_progress(progress)
        files.download_dir(
            self._usable_box(),
            remote_dir,
            local_dir,
            self._op_deadline(),
            self._housekeeping_run,
            files.Meter(progress),
        )

    def _housekeeping_run(self, argv: list[str]) -> RunResult:
        return self.run(argv, max_output=files.HOUSEKEEPING_OUTPUT)

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


def _check_output_options(max_output: int, on_output: object) -> None:
    if not isinstance(max_output, int) or isinstance(max_output, bool) or max_output < 0:
        raise ValueError("max_output must be an int >= 0")
    if on_output is not None and not callable(on_output):
        raise TypeError("on_output must be callable")


def _seconds_or_none(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds or None")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive, finite number of seconds")
    return float(value)
