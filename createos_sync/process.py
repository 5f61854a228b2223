"""Managed processes: creation, following output to the end, timeouts, termination.

``Lease.run`` and background ``Process`` objects share this one engine. A
plain ``run("true")`` costs three requests: process creation, the output
stream, and the stdin close that releases the start gate. ``stdin=`` adds
one upload of the staged input. A terminal process (``pty``) costs the same:
its gate is released by a typed key instead (see ``_command.RELEASE_KEY``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import BinaryIO, NoReturn

from . import _api, _sandbox, files
from ._box import Box
from ._command import RELEASE_KEY, RELEASE_LINE, SHELL, Command, Gate, unwrap
from ._containment import DEFAULT_GRACE, CleanupTime, terminate_confirmed
from ._deadline import Deadline
from ._follow import Deliver, Follower, Keep
from ._http import Stream
from ._ndjson import Exit
from ._output import Capture, LiveOutput, fan_out
from ._recovery import ServiceRecovery
from ._terminal import EOF_KEY, Size, checked_size
from .errors import (
    CreateosApiError,
    CreateosCleanupError,
    CreateosError,
    LeaseClosed,
    OperationTimeout,
    ProtocolError,
    SandboxUnavailable,
    add_note,
    may_have_taken_effect,
)
from .models import ProcessInfo
from .result import RunResult, describe_args

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
    name, so the sandbox must be destroyed at close. Once the lease closes,
    no creation is sent (``LeaseClosed``); one sent before is waited for by
    ``close()``, which then terminates its process.
    """
    if box.closing.is_set():
        raise LeaseClosed("this lease is closing: no new process may start in it")
    staged = None
    if stdin is not None:
        staged = files.scratch_path("stdin")
        files.write(box, staged, stdin, deadline)
    args = command.wrapper(gate, staged)
    with box.table.creating():
        try:
            record = _api.create_process(
                box.transport, box.sandbox_id, SHELL, args, deadline, pty=pty
            )
        except BaseException as exc:
            if isinstance(exc, CreateosApiError) and exc.status == 409:
                # The sandbox may have failed: that, not "HTTP 409", is what the caller must learn.
                detail = "it can no longer start processes"
                _sandbox.raise_if_unavailable(
                    box.transport, box.sandbox_id, deadline, detail, box.explain
                )
            if not may_have_taken_effect(exc):
                raise
            _poison(box, exc)
        process_id: str = record["process_id"]
        box.table.started(process_id)
    log.info("started process %s in sandbox %s", process_id, box.sandbox_id)
    if pty is not None and record.get("kind", "pty") != "pty":
        # On pipes, the key that releases a terminal's gate would never
        # release it: the process would wait forever. It must not stay.
        Execution(box, process_id, lambda stream, text: None).terminate()
        raise ProtocolError(f"the service started process {process_id} without a terminal")
    return process_id


def release(
    box: Box, process_id: str, gate: Gate, deadline: Deadline, *, typed: bytes = b""
) -> None:
    """Open the start gate (1 request); ``typed`` follows the release key on a terminal."""
    if gate is Gate.STDIN_EOF:
        _api.close_stdin(box.transport, box.sandbox_id, process_id, deadline)
        return
    key = RELEASE_LINE if gate is Gate.STDIN_LINE else RELEASE_KEY + typed
    _api.send_input(box.transport, box.sandbox_id, process_id, key, deadline)


def _poison(box: Box, exc: BaseException) -> NoReturn:
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
    if isinstance(exc, CreateosApiError):
        raise CreateosApiError(
            exc.operation,
            exc.status,
            request_id=exc.request_id,
            outcome_unknown=True,
            detail=poisoned,
        ) from None
    if isinstance(exc, ProtocolError):  # an answer without a usable process id
        raise ProtocolError(f"{exc}; {poisoned}") from None
    add_note(exc, poisoned)
    raise exc


class Execution:
    """One managed process followed from this client: its output and its end."""

    def __init__(
        self,
        box: Box,
        process_id: str,
        deliver: Deliver | None,
        *,
        keep: Keep | None = None,
        after: int = 0,
    ) -> None:
        self.box = box
        self.id = process_id
        recovery = ServiceRecovery(box, process_id)
        self.follower = Follower(
            self._connect, deliver, keep=keep, after=after, sleep=box.sleep, recovery=recovery
        )

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
    deliver: Deliver | None,
    escalate: Callable[[], None],
    pty: Size | None = None,
) -> RunResult:
    """Run ``command`` to its end, or to its timeout, and return what it left behind.

    Whatever interrupts the run (an error, Ctrl-C) first terminates the
    process tree, then propagates. ``escalate`` is called when a second
    Ctrl-C arrives during that termination: it destroys the sandbox. A
    process that closing the lease terminated (from another thread) raises
    ``LeaseClosed``, or, when the lease reached its ``max_lifetime``, ends
    as timed out; one that exited on its own meanwhile keeps its result. On
    a terminal, nobody types: the release key is followed by a Ctrl-D, so
    that a command reading lines sees the end of its input at once, as a
    pipe command sees an empty stdin.
    """
    started = time.monotonic()
    deadline = Deadline.after(timeout)
    gate = Gate.STDIN_EOF if pty is None else Gate.TERMINAL
    process_id = launch(box, command, gate=gate, stdin=stdin, deadline=deadline, pty=pty)
    execution = Execution(box, process_id, deliver, keep=capture.write)
    try:
        exit_frame = execution.follow(
            deadline, release=lambda: release(box, process_id, gate, deadline, typed=EOF_KEY)
        )
    except BaseException as exc:
        if not (box.closing.is_set() and isinstance(exc, CreateosError)):
            stop(execution, escalate)
            raise
        exit_frame, cut = None, True  # the lease closed under this run
    else:
        # killed by a signal after closing began terminating it: cut short by close()
        cut = exit_frame is not None and exit_frame.signal is not None and (
            box.table.was_cut(process_id)
        )
        if exit_frame is None:
            log.info("process %s timed out after %g s: terminating it", process_id, timeout)
            stop(execution, escalate)
    execution.follower.flush()
    if cut and not box.table.expired:
        raise LeaseClosed(
            f"the lease was closed while command {describe_args(command.args)} ran: closing it "
            f"terminated process {process_id}"
        )
    timed_out = exit_frame is None or cut
    signal = None if exit_frame is None else exit_frame.signal
    exit_code = None if timed_out or exit_frame is None or signal else exit_frame.exit_code
    result = RunResult(
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
    execution.follower.raise_if_lost(result)
    return result


class Process:
    """A process running in the background of a lease; read it like ``subprocess.Popen``.

    Its output is followed from a thread as soon as it starts, so nothing is
    evicted from the journal while nobody reads: ``output()`` iterates over
    it live, ``wait()`` returns the ``RunResult``. Unfinished processes are
    terminated when the lease closes. ``terminal`` says whether it runs on a
    terminal (``pty=``).
    """

    def __init__(
        self,
        box: Box,
        process_id: str,
        args: str | tuple[str, ...],
        *,
        max_output: int,
        on_output: Deliver | None = None,
        echo: Deliver | None = None,
        stdin_open: bool = False,
        after: int = 0,
        terminal: bool = False,
    ) -> None:
        self.id = process_id
        self.args = args
        self.terminal = terminal
        self._box = box
        self._stdin_open = stdin_open
        self._capture = Capture(max_output)
        self._live = LiveOutput(max_output)
        self._execution = Execution(
            box,
            process_id,
            fan_out(self._live.put, on_output, echo),
            keep=self._capture.write,
            after=after,
        )
        self._started = time.monotonic()
        self._attached = threading.Event()
        self._done = threading.Event()
        self._exit: Exit | None = None
        self._error: BaseException | None = None
        self._duration = 0.0
        self._thread = threading.Thread(
            target=self._follow, name=f"createos-{process_id}", daemon=True
        )

    def _begin(self, release: Callable[[], None] | None) -> None:
        """Start following; return once the stream is attached and the gate released."""
        self._release = release
        self._thread.start()
        while not self._attached.wait(0.05):
            if self._done.is_set():
                break
        if self._error is not None and not self._attached.is_set():
            raise self._error

    def _follow(self) -> None:
        def attached() -> None:
            if self._release is not None:
                self._release()
            self._attached.set()

        try:
            self._exit = self._execution.follow(Deadline.after(math.inf), attached)
        except BaseException as exc:  # handed to wait(); the process is stopped below
            self._error = exc
            if not self._box.closing.is_set():
                self._execution.terminate()
        finally:
            self._execution.follower.flush()
            self._duration = time.monotonic() - self._started
            self._done.set()
            self._live.end()

    @property
    def running(self) -> bool:
        """True until the process was seen to exit (or its following failed)."""
        return not self._done.is_set()

    def wait(self, timeout: float | None = None) -> RunResult:
        """Wait for the exit and return the result.

        Raises:
            OperationTimeout: ``timeout`` passed first (the process keeps running).
            OutputLostError, CreateosApiError: following the output failed.
        """
        if not self._done.wait(timeout):
            raise OperationTimeout(f"waiting for process {self.id}", timeout or 0.0)
        if self._error is not None:
            raise self._error
        terminated = self._exit is None or self._box.closing.is_set()
        signal = None if self._exit is None else self._exit.signal
        result = RunResult(
            args=self.args,
            exit_code=None if terminated or signal or self._exit is None else self._exit.exit_code,
            stdout=self._capture.stdout.getvalue(),
            stderr=self._capture.stderr.getvalue(),
            process_id=self.id,
            signal=signal,
            timed_out=terminated,
            truncated=self._capture.truncated,
            duration=self._duration,
        )
        self._execution.follower.raise_if_lost(result)
        return result

    def output(self) -> Iterator[tuple[str, str]]:
        """Yield ``(stream, text)`` as it arrives, until the process ends.

        Output not yet consumed is buffered up to ``max_output`` characters;
        beyond that the oldest is dropped (the capture in ``wait()``'s result
        is unaffected). Meant for one consumer at a time.
        """
        return self._live.drain()

    def send(self, data: str | bytes) -> None:
        r"""Write ``data`` (``str`` as UTF-8, or ``bytes``) to the process's stdin (1 request).

        On a terminal it is typed, and processed as a keyboard's would be:
        echoed, a line ends with ``"\r"`` (Enter), ``"\x03"`` is Ctrl-C.

        Raises ValueError when its stdin is closed (given as ``stdin=``, or
        ``close_stdin()`` was called).
        """
        if not isinstance(data, (str, bytes)):
            raise TypeError("data must be str or bytes")
        if not self._stdin_open:
            raise ValueError("this process's stdin is closed (it was given stdin= or closed)")
        payload = data.encode("utf-8") if isinstance(data, str) else data
        _api.send_input(
            self._box.transport, self._box.sandbox_id, self.id, payload, self._box.deadline()
        )

    def close_stdin(self) -> None:
        r"""Close the process's stdin, so that it reads EOF (1 request).

        Raises:
            ValueError: a terminal process has no stdin to close (before any
                request); ``send("\x04")`` types Ctrl-D, which ends the input
                of a program reading lines.
        """
        if self.terminal:
            raise ValueError("a terminal process has no stdin to close: send('\\x04') types Ctrl-D")
        if self._stdin_open:
            box = self._box
            _api.close_stdin(box.transport, box.sandbox_id, self.id, box.deadline())
            self._stdin_open = False

    def resize(self, rows: int, cols: int) -> None:
        """Change a terminal process's size; its foreground programs get SIGWINCH (1 request).

        Args:
            rows: the terminal's new height in lines, 1..65535.
            cols: its new width in columns, 1..65535.

        Raises:
            ValueError, TypeError: not a terminal process, or not such a size
                (before any request).
        """
        if not self.terminal:
            raise ValueError(f"process {self.id} is not on a terminal: start it with pty=...")
        rows, cols = checked_size(rows, cols)
        _api.resize_terminal(
            self._box.transport, self._box.sandbox_id, self.id, rows, cols, self._box.deadline()
        )

    def terminate(self, grace: float = DEFAULT_GRACE) -> None:
        """SIGTERM the process tree, SIGKILL what remains after ``grace`` seconds.

        Raises:
            CreateosCleanupError: the end of the tree could not be confirmed
                (the lease is then poisoned and will destroy its sandbox).
        """
        if not self._execution.terminate(grace):
            raise CreateosCleanupError(
                f"termination of process {self.id} could not be confirmed; the lease will "
                f"destroy sandbox {self._box.sandbox_id} when it closes",
                sandbox_id=self._box.sandbox_id,
                process_ids=[self.id],
            )
        self._done.wait(5.0)

    def kill(self) -> None:
        """Terminate the process tree without a grace period."""
        self.terminate(grace=0.0)

    def __repr__(self) -> str:
        state = "running" if self.running else "finished"
        return f"<Process {self.id} {state} args={describe_args(self.args)}>"


def start(
    box: Box,
    command: Command,
    *,
    stdin: StdinData | None,
    max_output: int,
    on_output: Deliver | None,
    echo: Deliver | None,
    pty: Size | None = None,
) -> Process:
    """Launch ``command`` in the background and attach its output before it starts."""
    if pty is not None:
        gate = Gate.TERMINAL
    else:
        gate = Gate.STDIN_EOF if stdin is not None else Gate.STDIN_LINE
    deadline = box.deadline()
    process_id = launch(box, command, gate=gate, stdin=stdin, deadline=deadline, pty=pty)
    handle = Process(
        box,
        process_id,
        command.args,
        max_output=max_output,
        on_output=on_output,
        echo=echo,
        stdin_open=stdin is None,
        terminal=pty is not None,
    )
    handle._begin(lambda: release(box, process_id, gate, deadline))
    return handle


def reattach(
    box: Box, process_id: str, *, max_output: int, on_output: Deliver | None, echo: Deliver | None
) -> Process:
    """A handle on a process this client did not start here; its output replays from the journal."""
    record = _api.get_process(box.transport, box.sandbox_id, process_id, box.deadline())
    if record is None:
        raise SandboxUnavailable(box.sandbox_id, "missing", f"it has no process {process_id}")
    info = ProcessInfo.from_api(record)
    raw_args = [str(a) for a in record.get("args") or ()]
    args = unwrap(raw_args) or tuple(raw_args) or str(record.get("cmd") or process_id)
    if not info.tree_exited:
        box.table.started(process_id)
    handle = Process(
        box,
        process_id,
        args,
        max_output=max_output,
        on_output=on_output,
        echo=echo,
        stdin_open=True,  # unknown from here: let the service refuse input if it is closed
        terminal=record.get("kind") == "pty",
    )
    handle._begin(None)
    return handle
