"""Running one managed process to its end: creation, the start gate, following, stopping.

``Lease.run`` and background ``Process`` objects share this one engine. A
plain ``run("true")`` costs three requests: process creation, the output
stream, and the stdin close that releases the start gate. ``stdin=`` adds
one upload of the staged input. A terminal process (``pty``) costs the same:
its gate is released by a typed key instead (see ``command.RELEASE_KEY``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, BinaryIO, NoReturn

from .. import _files as files
from .._sandboxes import sandbox as _sandbox
from .._sandboxes.box import Box
from .._sandboxes.containment import DEFAULT_GRACE, CleanupTime, terminate_confirmed
from .._wire import api as _api
from .._wire.deadline import Deadline
from .._wire.http import Stream
from .._wire.ndjson import Exit
from ..cancel import Cancel
from ..errors import (
    CreateosApiError,
    CreateosError,
    LeaseClosed,
    ProtocolError,
    SandboxUnavailable,
    add_note,
    may_have_taken_effect,
    restated,
)
from ..result import RunResult, describe_args
from .command import RELEASE_KEY, RELEASE_LINE, SHELL, Command, CommandTooLong, Gate
from .follow import REFUSED_FOR_A_DEAD_SANDBOX, Follower, Keep
from .output import Output
from .recovery import ServiceRecovery
from .terminal import EOF_KEY, Size

log = logging.getLogger("createos_sync.process")

StdinData = str | bytes | bytearray | memoryview | BinaryIO


def validate_stdin(stdin: object) -> None:
    """Raise TypeError for stdin that is neither text, bytes nor a binary file."""
    if stdin is None or isinstance(stdin, (str, bytes, bytearray, memoryview)):
        return
    if not callable(getattr(stdin, "read", None)):
        raise TypeError("stdin must be str, bytes, a binary file object or None")


def launch(
    box: Box,
    command: Command,
    *,
    gate: Gate,
    stdin: StdinData | None,
    deadline: Deadline,
    pty: Size | None = None,
) -> str:
    """Stage stdin if any, create the process (on a terminal if ``pty``), record it; its id.

    A creation whose outcome is unknown (no answer, or one without a usable
    ``process_id``) poisons the lease: a process may exist that nobody can
    name, so the sandbox must be destroyed at close. A command too long to
    pass as an argument is staged as a script file first (1 more request).
    Once the lease closes,
    no creation is sent (``LeaseClosed``); one sent before is waited for by
    ``close()``, which then terminates its process.
    """
    if box.closing.is_set():
        raise LeaseClosed("this lease is closing: no new process may start in it")
    staged = None
    if stdin is not None:
        staged = files.scratch_path("stdin")
        files.write(box, staged, stdin, deadline)
    try:
        args = command.wrapper(gate, staged)
    except CommandTooLong:  # too long for one argument: stage the script as a file
        script = files.scratch_path("script")
        files.write(box, script, command.staged_script(), deadline)
        args = command.wrapper(gate, staged, script)
    with box.table.creating():
        try:
            record = _api.create_process(
                box.transport, box.sandbox_id, SHELL, args, deadline, pty=pty,
                secrets=command.secrets(),
            )  # fmt: skip
        except BaseException as exc:
            if isinstance(exc, CreateosApiError) and exc.status in REFUSED_FOR_A_DEAD_SANDBOX:
                # The sandbox may be gone or failed: that, not "HTTP 404", is what the caller
                # must learn (1 read, on that path only).
                detail = "it can no longer start processes"
                _sandbox.raise_if_unavailable(
                    box.transport, box.sandbox_id, deadline, detail, box.explain
                )
            if not may_have_taken_effect(exc):
                raise
            poison_after(box, exc)
        process_id: str = record["process_id"]
        box.table.started(process_id)
    log.info("started process %s in sandbox %s", process_id, box.sandbox_id)
    if pty is not None and record.get("kind", "pty") != "pty":
        # On pipes, the key that releases a terminal's gate would never
        # release it: the process would wait forever. It must not stay.
        ManagedExecution(box, process_id, None).terminate()
        raise ProtocolError(f"the service started process {process_id} without a terminal")
    return process_id


def release(
    box: Box, process_id: str, gate: Gate, deadline: Deadline, *, typed: bytes = b""
) -> None:
    """Open the start gate (1 request); ``typed`` follows the release key or line, as the
    command's first input (never for a gate released by closing stdin)."""
    if gate is Gate.STDIN_EOF:
        _api.close_stdin(box.transport, box.sandbox_id, process_id, deadline)
        return
    key = (RELEASE_LINE if gate is Gate.STDIN_LINE else RELEASE_KEY) + typed
    _api.send_input(box.transport, box.sandbox_id, process_id, key, deadline)


def poison_after(box: Box, exc: BaseException) -> NoReturn:
    """A process creation of unknown outcome: poison the lease, and say so in the error."""
    box.table.ambiguous_creation()
    log.error(
        "process creation in sandbox %s failed without a clear answer: the lease is "
        "poisoned and will destroy the sandbox when it closes",
        box.sandbox_id,
    )
    poisoned = (
        "the process may have been created; the lease is poisoned and will destroy "
        f"sandbox {box.sandbox_id} when it closes"
    )
    said = restated(exc, poisoned, outcome_unknown=True)  # also an answer without a usable id
    if said is exc:
        add_note(exc, poisoned)
        raise exc
    raise said from None


class ManagedExecution:
    """One managed process followed from this client: its output and its end."""

    def __init__(self, box: Box, process_id: str, keep: Keep | None, *, after: int = 0) -> None:
        self.box = box
        self.id = process_id
        self.recovery = ServiceRecovery(box, process_id)
        self.follower = Follower(
            self._connect, keep, after=after, sleep=box.sleep, recovery=self.recovery
        )

    def _connect(self, after: int, deadline: Deadline) -> Stream:
        return _api.connect_output(
            self.box.transport, self.box.sandbox_id, self.id, after, deadline
        )

    def follow(
        self,
        deadline: Deadline,
        release: Callable[[], None] | None = None,
        cancel: Cancel | None = None,
    ) -> Exit | None:
        """Follow output to the exit frame; None if the deadline (or ``cancel``) came first.

        A SIGKILL that closing did not send may be the sandbox dying under the
        process (its ttl watchdog, a command deleting it): the sandbox is read
        (1 request, on that path only), and ``SandboxUnavailable`` (or
        ``LeaseExpired``) raised when it is gone, not an ordinary result.
        """
        exit_frame = self.follower.follow(deadline, release, cancel)
        if exit_frame is not None:
            self.box.table.finished(self.id)
            if exit_frame.signal == "SIGKILL" and not self.box.closing.is_set():
                self.recovery.check_sandbox(self.box.deadline())
        return exit_frame

    def terminate(self, grace: float = DEFAULT_GRACE) -> bool:
        """Terminate the tree under a fresh deadline; True if its end is confirmed."""
        confirmed = terminate_confirmed(
            self.box.transport,
            self.box.sandbox_id,
            self.id,
            budget=CleanupTime.of(self.box.transport),
            grace=grace,
        )
        self.box.table.settle(self.id, confirmed)
        if not confirmed:
            log.error("termination of process %s could not be confirmed", self.id)
        return confirmed

    def cut_by_close(self, exit_frame: Exit | None) -> bool:
        """Whether closing the lease ended the process: killed by a signal after closing
        began terminating it (one that exited on its own meanwhile keeps its result)."""
        return (
            exit_frame is not None
            and exit_frame.signal is not None
            and self.box.table.was_cut(self.id)
        )


def never_sent(
    box: Box, command: Command, timeout: float, output: Output, duration: float = 0.0
) -> RunResult[Any]:
    """The run ended (its deadline, a cancel) before the command was sent: a timed-out
    result with no process."""
    log.info("command %s ended before it was sent", describe_args(command.args))
    return RunResult(
        args=command.args, exit_code=None, stdout=output.stdout, stderr=output.stderr,
        process_id="", timed_out=True, duration=duration, timeout=timeout,
        sandbox_id=box.sandbox_id,
    )  # fmt: skip


def gone_with_its_sandbox(exc: BaseException) -> bool:
    """Whether ``exc`` says the sandbox is gone: its processes with it, none to terminate."""
    return isinstance(exc, SandboxUnavailable) and exc.status in ("destroying", "destroyed")


def stop(execution: ManagedExecution, escalate: Callable[[], None]) -> None:
    """Terminate a process we stop following; a Ctrl-C meanwhile escalates to ``escalate``."""
    try:
        execution.terminate()
    except KeyboardInterrupt:
        log.warning(
            "interrupted while terminating process %s: destroying the sandbox", execution.id
        )
        escalate()
        raise


def run(
    box: Box,
    command: Command,
    *,
    stdin: StdinData | None,
    timeout: float,
    output: Output,
    escalate: Callable[[], None],
    pty: Size | None = None,
    cancel: Cancel | None = None,
) -> RunResult[Any]:
    """Run ``command`` to its end, or to its timeout, and return what it left behind.

    Whatever interrupts the run (an error, Ctrl-C) first terminates the
    process tree, then propagates. ``escalate`` is called when a second
    Ctrl-C arrives during that termination: it destroys the sandbox. A
    process that closing the lease terminated (from another thread) raises
    ``LeaseClosed``, or, when the lease reached its ``max_lifetime``, ends
    as timed out; one that exited on its own meanwhile keeps its result. On
    a terminal, nobody types: the release key is followed by a Ctrl-D, so
    that a command reading lines sees the end of its input at once, as a
    pipe command sees an empty stdin. A ``cancel`` set meanwhile ends the
    process as its timeout would.
    """
    if cancel is not None and cancel.is_set():
        return never_sent(box, command, timeout, output)
    started = time.monotonic()
    deadline = Deadline.after(timeout)
    gate = Gate.STDIN_EOF if pty is None else Gate.TERMINAL
    process_id = launch(box, command, gate=gate, stdin=stdin, deadline=deadline, pty=pty)
    execution = ManagedExecution(box, process_id, output.write)
    try:
        exit_frame = execution.follow(
            deadline,
            release=lambda: release(box, process_id, gate, deadline, typed=EOF_KEY),
            cancel=cancel,
        )
    except BaseException as exc:
        if gone_with_its_sandbox(exc):
            raise
        if not (box.closing.is_set() and isinstance(exc, CreateosError)):
            stop(execution, escalate)
            raise
        exit_frame, cut = None, True  # the lease closed under this run
    else:
        cut = execution.cut_by_close(exit_frame)
        if exit_frame is None:
            log.info("process %s timed out after %g s: terminating it", process_id, timeout)
            stop(execution, escalate)
    output.end()
    if cut and not box.table.expired:
        raise LeaseClosed(
            f"the lease was closed while command {describe_args(command.args)} ran: closing it "
            f"terminated process {process_id}"
        )
    timed_out = exit_frame is None or cut
    signal = None if exit_frame is None else exit_frame.signal
    exit_code = None if timed_out or exit_frame is None or signal else exit_frame.exit_code
    result: RunResult[Any] = RunResult(
        args=command.args,
        exit_code=exit_code,
        stdout=output.stdout,
        stderr=output.stderr,
        process_id=process_id,
        signal=signal,
        timed_out=timed_out,
        truncated=output.truncated,
        duration=time.monotonic() - started,
        timeout=timeout,
        sandbox_id=box.sandbox_id,
    )
    execution.follower.raise_if_lost(result)
    return result
