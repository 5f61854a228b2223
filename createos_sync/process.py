"""Managed processes: creation, following output to the end, timeouts, termination.

``Lease.run`` and background ``Process`` objects share this one engine. A
plain ``run("true")`` costs three requests: process creation, the output
stream, and the stdin close that releases the start gate. ``stdin=`` adds
one upload of the staged input.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import BinaryIO

from . import _api, files
from ._box import Box
from ._command import SHELL, Command, Gate, staged_stdin_path
from ._containment import DEFAULT_GRACE, terminate_confirmed
from ._deadline import Deadline
from ._follow import Deliver, Follower
from ._http import Stream
from ._ndjson import Exit
from ._output import Capture
from .errors import CreateosApiError, CreateosError, may_have_taken_effect
from .result import RunResult

log = logging.getLogger("createos_sync.process")

StdinData = str | bytes | bytearray | memoryview | BinaryIO


def validate_stdin(stdin: object) -> None:
    """Raise TypeError for stdin that is neither text, bytes nor a binary file."""
    if stdin is None or isinstance(stdin, (str, bytes, bytearray, memoryview)):
        return
    if not callable(getattr(stdin, "read", None)):
        raise TypeError("stdin must be str, bytes, a binary file object or None")


def launch(
    box: Box, command: Command, *, gate: Gate, stdin: StdinData | None, deadline: Deadline
) -> str:
    """Stage stdin if any, create the process, and record it; return its id.

    A creation whose outcome is unknown poisons the lease: a process may
    exist that nobody can name, so the sandbox must be destroyed at close.
    """
    staged = None
    if stdin is not None:
        staged = staged_stdin_path()
        files.write(box, staged, stdin, deadline)
    args = command.wrapper(gate, staged)
    try:
        record = _api.create_process(box.transport, box.sandbox_id, SHELL, args, deadline)
    except BaseException as exc:
        if not may_have_taken_effect(exc):
            raise
        box.table.ambiguous_creation()
        log.error(
            "process creation in sandbox %s failed without a clear answer: the lease is "
            "poisoned and will destroy the sandbox when it closes",
            box.sandbox_id,
        )
        if isinstance(exc, CreateosApiError):
            raise CreateosApiError(
                exc.operation,
                exc.status,
                request_id=exc.request_id,
                outcome_unknown=True,
                detail=f"the process may have been created; the lease is poisoned and will "
                f"destroy sandbox {box.sandbox_id} when it closes",
            ) from None
        raise
    process_id: str = record["process_id"]
    box.table.started(process_id)
    log.info("started process %s in sandbox %s", process_id, box.sandbox_id)
    return process_id


class Execution:
    """One managed process followed from this client: its output and its end."""

    def __init__(self, box: Box, process_id: str, deliver: Deliver, *, after: int = 0) -> None:
        self.box = box
        self.id = process_id
        self.follower = Follower(self._connect, deliver, after=after, sleep=box.sleep)

    def _connect(self, after: int, deadline: Deadline) -> Stream:
        return _api.connect_output(
            self.box.transport, self.box.sandbox_id, self.id, after, deadline
        )

    def follow(self, deadline: Deadline, release: Callable[[], None] | None = None) -> Exit | None:
        """Follow output to the exit frame; None if the deadline came first."""
        exit_frame = self.follower.follow(deadline, release)
        if exit_frame is not None:
            self.box.table.finished(self.id)
        return exit_frame

    def close_stdin(self, deadline: Deadline) -> None:
        _api.close_stdin(self.box.transport, self.box.sandbox_id, self.id, deadline)

    def terminate(self, grace: float = DEFAULT_GRACE) -> bool:
        """Terminate the tree under a fresh deadline; True if its end is confirmed."""
        confirmed = terminate_confirmed(
            self.box.transport,
            self.box.sandbox_id,
            self.id,
            deadline=self.box.cleanup_deadline(),
            grace=grace,
        )
        if confirmed:
            self.box.table.finished(self.id)
        else:
            self.box.table.unconfirmed(self.id)
            log.error("termination of process %s could not be confirmed", self.id)
        return confirmed


def stop(execution: Execution, escalate: Callable[[], None]) -> None:
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
    capture: Capture,
    deliver: Deliver,
    escalate: Callable[[], None],
) -> RunResult:
    """Run ``command`` to its end, or to its timeout, and return what it left behind.

    Whatever interrupts the run (an error, Ctrl-C) first terminates the
    process tree, then propagates. ``escalate`` is called when a second
    Ctrl-C arrives during that termination: it destroys the sandbox.
    """
    started = time.monotonic()
    deadline = Deadline.after(timeout)
    process_id = launch(box, command, gate=Gate.STDIN_EOF, stdin=stdin, deadline=deadline)
    execution = Execution(box, process_id, deliver)
    try:
        exit_frame = execution.follow(deadline, release=lambda: execution.close_stdin(deadline))
    except BaseException as exc:
        if not (box.closing.is_set() and isinstance(exc, CreateosError)):
            stop(execution, escalate)
            raise
        exit_frame = None  # the lease was closed under this run (max_lifetime): a timeout
    else:
        if exit_frame is None:
            log.info("process %s timed out after %g s: terminating it", process_id, timeout)
            stop(execution, escalate)
    execution.follower.flush()
    timed_out = exit_frame is None or box.closing.is_set()
    signal = None if exit_frame is None else exit_frame.signal
    exit_code = None if timed_out or exit_frame is None or signal else exit_frame.exit_code
    return RunResult(
        args=command.args,
        exit_code=exit_code,
        stdout=capture.stdout.getvalue(),
        stderr=capture.stderr.getvalue(),
        process_id=process_id,
        signal=signal,
        timed_out=timed_out,
        truncated=capture.truncated,
        duration=time.monotonic() - started,
        timeout=timeout,
    )
