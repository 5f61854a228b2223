"""Background processes: the ``Process`` handle, and how one starts or is reattached.

``createos_sync.process`` names ``Process`` for users; it has no public constructor
(a user gets one from ``Lease.start`` or ``Lease.process``), so that no public
signature takes this room's ``Box``. ``start`` and ``reattach`` make one with
``Process._create``, as ``ssl.SSLContext.wrap_socket`` makes an ``SSLSocket``.
The engine that creates a process, releases its start gate and follows its
output is ``createos_sync._commands.execution``; a ``Process`` follows it from a
thread of its own. ``start()`` costs three requests, like ``run()``.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, AnyStr, Generic

from .._sandboxes.box import Box
from .._sandboxes.containment import DEFAULT_GRACE
from .._wire import api as _api
from .._wire.deadline import Deadline
from .._wire.ndjson import Exit
from ..errors import (
    CreateosApiError,
    CreateosCleanupError,
    LeaseClosed,
    Operation,
    OperationTimeout,
)
from ..models import ProcessInfo
from ..result import RunResult, describe_args
from .command import Command, Gate, unwrap
from .execution import ManagedExecution, StdinData, gone_with_its_sandbox, launch, release
from .output import LiveOutput, OnOutput, Output
from .terminal import Size, checked_size

log = logging.getLogger("createos_sync.process")


class Process(Generic[AnyStr]):
    """A process running in the background of a lease; read it like ``subprocess.Popen``.

    ``Process[str]`` by default; ``Process[bytes]`` when started with
    ``text=False``: its output and result are then the exact bytes.

    Its output is followed from a thread as soon as it starts, so nothing is
    evicted from the journal while nobody reads: ``output()`` iterates over
    it live, ``wait()`` returns the ``RunResult``, and ``poll()`` /
    ``returncode`` answer as ``Popen``'s do. Unfinished processes are
    terminated when the lease closes. ``terminal`` says whether it runs on a
    terminal (``pty=``).
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError(
            "Process has no public constructor: Lease.start() starts a process, "
            "Lease.process(process_id) reattaches to one"
        )

    @classmethod
    def _create(
        cls,
        box: Box,
        process_id: str,
        args: str | tuple[str, ...],
        *,
        max_output: int,
        text: bool,
        on_output: OnOutput | None,
        echo: OnOutput | None,
        stdin_open: bool,
        terminal: bool,
    ) -> Process[Any]:
        """The handle of a process of ``box``, not followed yet (``_begin``)."""
        handle = cls.__new__(cls)
        sinks = (on_output, echo)
        handle._init(box, process_id, args, max_output, text, sinks, stdin_open, terminal)
        return handle

    def _init(
        self,
        box: Box,
        process_id: str,
        args: str | tuple[str, ...],
        max_output: int,
        text: bool,
        sinks: tuple[OnOutput | None, OnOutput | None],
        stdin_open: bool,
        terminal: bool,
    ) -> None:
        """The state ``__init__`` would set: the output's capture, the following thread."""
        self.id = process_id
        self.args = args
        self.terminal = terminal
        self._box = box
        self._stdin_open = stdin_open
        self._live = LiveOutput(max_output)
        self._output = Output(max_output, text=text, sinks=(self._live.put, *sinks))
        self._execution = ManagedExecution(box, process_id, self._output.write)
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
            if not (self._box.closing.is_set() or gone_with_its_sandbox(exc)):
                self._execution.terminate()
        finally:
            self._output.end()
            self._duration = time.monotonic() - self._started
            self._done.set()
            self._live.end()

    @property
    def running(self) -> bool:
        """True until the process was seen to exit (or its following failed)."""
        return not self._done.is_set()

    @property
    def returncode(self) -> int | None:
        """As ``Popen.returncode``: None while it runs, then its exit code, or ``-N`` when
        signal N ended it (``-15``, SIGTERM, when closing the lease terminated it).

        Unlike ``RunResult.returncode`` (None for a signal), a process that has
        ended always has a number here, so that ``while p.poll() is None`` ends. It
        stays None when following the process failed: ``wait()`` raises why.
        """
        if self.running or self._error is not None:
            return None
        try:
            return _returncode(self.wait(0))
        except Exception:  # output lost: the exit status is wait()'s to report
            return None

    def poll(self) -> int | None:
        """As ``Popen.poll()``: ``returncode`` without waiting (no request).

        Raises what ``wait()`` raises when following the process failed.
        """
        if self.running:
            return None
        return _returncode(self.wait(0))

    def wait(self, timeout: float | None = None) -> RunResult[AnyStr]:
        """Wait for the exit and return the result.

        A process that closing the lease terminated ends with ``timed_out=True``
        and ``exit_code=None``; one that exited on its own keeps its exit code,
        even when ``wait()`` is called after the lease closed.

        Raises:
            OperationTimeout: ``timeout`` passed first (the process keeps running).
            OutputLostError, CreateosApiError: following the output failed.
        """
        if not self._done.wait(timeout):
            raise OperationTimeout(f"waiting for process {self.id}", timeout or 0.0)
        if self._error is not None:
            raise self._error
        terminated = self._exit is None or self._execution.cut_by_close(self._exit)
        signal = None if self._exit is None else self._exit.signal
        result: RunResult[AnyStr] = RunResult(
            args=self.args,
            exit_code=None if terminated or signal or self._exit is None else self._exit.exit_code,
            stdout=self._output.stdout,
            stderr=self._output.stderr,
            process_id=self.id,
            signal=signal,
            timed_out=terminated,
            truncated=self._output.truncated,
            duration=self._duration,
            sandbox_id=self._box.sandbox_id,
        )
        self._execution.follower.raise_if_lost(result)
        return result

    def output(self) -> Iterator[tuple[str, AnyStr]]:
        """Yield ``(stream, text)`` as it arrives, until the process ends
        (``(stream, bytes)``, the exact bytes, when started with ``text=False``).

        Output not yet consumed is buffered up to ``max_output`` characters (or bytes);
        beyond that the oldest is dropped (the capture in ``wait()``'s result
        is unaffected). Meant for one consumer at a time.
        """
        return self._live.drain()

    def send(self, data: str | bytes) -> None:
        r"""Write ``data`` (``str`` as UTF-8, or ``bytes``) to the process's stdin (1 request).

        On a terminal it is typed, and processed as a keyboard's would be:
        echoed, a line ends with ``"\r"`` (Enter), ``"\x03"`` is Ctrl-C.

        Raises ValueError when its stdin is closed (given as ``stdin=``, or
        ``close_stdin()`` was called); ``LeaseClosed`` once the lease closes
        (before any request).
        """
        if not isinstance(data, (str, bytes)):
            raise TypeError("data must be str or bytes")
        self._refuse_after_close()
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
        self._refuse_after_close()
        _api.resize_terminal(
            self._box.transport, self._box.sandbox_id, self.id, rows, cols, self._box.deadline()
        )

    def _refuse_after_close(self) -> None:
        """``LeaseClosed`` before any request once the lease closes (its processes end)."""
        if self._box.closing.is_set():
            raise LeaseClosed(f"the lease of process {self.id} is closed")

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


def _returncode(result: RunResult[Any]) -> int:
    """``Popen``'s convention: the exit code, or minus the number of the ending signal."""
    if result.exit_code is not None:
        return result.exit_code
    try:
        return -signal.Signals[result.signal or "SIGTERM"].value
    except KeyError:  # a signal this platform does not name: ended by a signal all the same
        return -signal.SIGTERM.value


def start(
    box: Box,
    command: Command,
    *,
    stdin: StdinData | None,
    max_output: int,
    text: bool,
    on_output: OnOutput | None,
    echo: OnOutput | None,
    pty: Size | None = None,
    first_input: bytes = b"",
) -> Process[Any]:
    """Launch ``command`` in the background and attach its output before it starts.

    ``first_input`` (stdin open, no terminal) reaches its stdin with the start gate's
    release: no request of its own.
    """
    if first_input and (stdin is not None or pty is not None):
        raise ValueError("first_input needs an open stdin and no terminal")
    if pty is not None:
        gate = Gate.TERMINAL
    else:
        gate = Gate.STDIN_EOF if stdin is not None else Gate.STDIN_LINE
    deadline = box.deadline()
    process_id = launch(box, command, gate=gate, stdin=stdin, deadline=deadline, pty=pty)
    handle = Process._create(
        box,
        process_id,
        command.args,
        max_output=max_output,
        text=text,
        on_output=on_output,
        echo=echo,
        stdin_open=stdin is None,
        terminal=pty is not None,
    )
    handle._begin(lambda: release(box, process_id, gate, deadline, typed=first_input))
    return handle


def reattach(
    box: Box,
    process_id: str,
    *,
    max_output: int,
    text: bool,
    on_output: OnOutput | None,
    echo: OnOutput | None,
) -> Process[Any]:
    """A handle on a process this client did not start here; its output replays from the journal."""
    record = _api.get_process(box.transport, box.sandbox_id, process_id, box.deadline())
    if record is None:
        detail = f"sandbox {box.sandbox_id} has no process {process_id}"
        raise CreateosApiError(Operation.PROCESS_CONTROL, 404, detail=detail)
    info = ProcessInfo.from_api(record)
    raw_args = [str(a) for a in record.get("args") or ()]
    args = unwrap(raw_args) or tuple(raw_args) or str(record.get("cmd") or process_id)
    if not info.tree_exited:
        box.table.started(process_id)
    handle = Process._create(
        box,
        process_id,
        args,
        max_output=max_output,
        text=text,
        on_output=on_output,
        echo=echo,
        stdin_open=True,  # unknown from here: let the service refuse input if it is closed
        terminal=record.get("kind") == "pty",
    )
    handle._begin(None)
    return handle
