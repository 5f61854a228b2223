"""``CodeContext``: one interpreter in the sandbox, kept between cells.

The kernel is a background process of the lease (``createos_sync._commands.processes``): its
output stream stays attached while it lives, so a cell costs one request, the
input that carries it, and its frames come back on the stream already open. A
kernel's first cell rides its start: the kernel's source and the cell go with the
start gate's release (3 requests: create, connect, release). The
kernel ends with the lease like any process of it (``close()`` terminates and
confirms it). When the kernel ends under a cell (``os._exit``, a kill, a crash),
the cell reports it and the next one starts a new kernel (``restarted``).
"""

from __future__ import annotations

import codecs
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import attrs

from .._commands import processes as _processes
from .._commands.command import Command
from .._commands.output import TailBuffer
from .._sandboxes.box import Box
from .._wire.server_text import log_line
from ..config import positive_seconds
from ..errors import CreateosApiError, CreateosError, LeaseClosed, ProtocolError
from . import _frames
from ._results import Execution, ExecutionError, Result

log = logging.getLogger("createos_sync.interpreter")

DEFAULT_MAX_OUTPUT = 4 * 1024 * 1024
# How long after its timeout a cell may take to end (the interrupt acts, its frames come
# back) before its kernel is stopped instead: the timeout itself, between these bounds.
TIMEOUT_GRACE, MIN_GRACE = 10.0, 2.0
# After Ctrl-C here: how long the cell has to end in the sandbox before its kernel is stopped.
INTERRUPT_GRACE = 5.0
_STDERR_KEPT = 4096
OnCodeOutput = Callable[[str, Any], None]


class _Kernel:
    """One kernel process and what its output stream brought: frames, queued in order."""

    def __init__(self) -> None:
        self.frames: queue.Queue[_frames.Frame | BaseException] = queue.Queue()
        self.reader = _frames.FrameReader()
        self.stderr = ""
        self.broken = False
        self.process: _processes.Process[str] | None = None

    def received(self, stream: str, text: str) -> None:
        """The output stream's text (from the following thread): frames to the queue."""
        if stream != "stdout":  # the kernel's own stderr: only a crash writes there
            self.stderr = (self.stderr + text)[-_STDERR_KEPT:]
            return
        if self.broken:
            return
        try:
            for frame in self.reader.feed(text):
                self.frames.put(frame)
        except Exception as exc:
            self.broken = True
            self.frames.put(exc)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.running


def _ends_soon(kernel: _Kernel, wait: float = 2.0) -> bool:
    """Whether the kernel is seen to end within ``wait`` seconds (its stream says so)."""
    ends = time.monotonic() + wait
    while kernel.running and time.monotonic() < ends:
        time.sleep(0.02)
    return not kernel.running


class CodeContext:
    """A separate Python interpreter in the sandbox (``Lease.code_context()``).

    Contexts share nothing. ``run_code()`` runs cells in it; ``close()`` (or
    leaving the ``with`` block) stops it; closing the lease stops it too.
    """

    def __init__(
        self,
        usable_box: Callable[[], Box],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        default_timeout: Callable[[], float],
    ) -> None:
        self._command = Command.parse(["python3", "-c", _frames.BOOTSTRAP], cwd=cwd, env=env)
        self._usable_box = usable_box
        self._default_timeout = default_timeout
        self._lock = threading.Lock()
        self._kernel: _Kernel | None = None
        self._lost = False  # the last kernel ended under a cell: the next one says so
        self._closed = False

    def run_code(
        self,
        code: str,
        *,
        timeout: float | None = None,
        on_output: OnCodeOutput | None = None,
        check: bool = False,
        max_output: int = DEFAULT_MAX_OUTPUT,
    ) -> Execution:
        """Run ``code`` as a cell of this interpreter (see ``Lease.run_code``): ``timeout``
        interrupts it, ``on_output(stream, data)`` sees its output and results live,
        ``check`` raises ``CodeFailed`` for an error, ``max_output`` bounds what is kept.
        Request budget: 1; 3 for the cell that starts the interpreter (a context's first, or
        the first after its interpreter was lost): create, connect, and the gate's release
        carrying the interpreter and the cell."""
        if not isinstance(code, str):
            raise TypeError("code must be a str of Python source")
        limit = (
            self._default_timeout()
            if timeout is None
            else positive_seconds("timeout", timeout, none_too=True)
        )
        if on_output is not None and not callable(on_output):
            raise TypeError("on_output must be callable")
        if not isinstance(max_output, int) or isinstance(max_output, bool) or max_output < 0:
            raise ValueError("max_output must be an int >= 0")
        with self._lock:
            if self._closed:
                raise LeaseClosed("this code context is closed")
            token = _frames.new_token()
            request = _frames.request("run", token, code=code, timeout=limit)
            kernel, cell = self._send_cell(request, _Cell(token, max_output, on_output))
            interrupted = None
            if cell.interrupted_at_send:  # Ctrl-C while the cell was being sent
                interrupted = self._interrupt(kernel, cell)
            try:
                execution = self._collect(kernel, cell, limit, interrupted)
            except Exception:  # on_output raised, say: the cell must not run on unread
                self._interrupt_quietly(kernel, cell)
                raise
        return execution.check() if check else execution

    def _send_cell(self, request: bytes, cell: _Cell) -> tuple[_Kernel, _Cell]:
        """Send the cell (1 request), or start a kernel with it (3 requests).

        A kernel found gone when its input is refused (ended between cells, killed
        from outside) is replaced once, and the cell says so (``restarted``).
        """
        for attempt in (1, 2):
            kernel = self._kernel
            if kernel is None or not kernel.running or kernel.broken:
                restarted = self._lost or kernel is not None
                kernel = self._new_kernel(request)
                cell.restarted, self._lost = restarted, False
                return kernel, cell
            assert kernel.process is not None
            try:
                kernel.process.send(request)
            except KeyboardInterrupt:
                cell.interrupted_at_send = True
            except CreateosApiError:
                if attempt == 2 or not _ends_soon(kernel):
                    raise
                self._lost = True
                continue
            return kernel, cell
        raise AssertionError("unreachable")

    def _interrupt(self, kernel: _Kernel, cell: _Cell) -> float:
        """Ctrl-C here: interrupt the cell there (1 request); a second one stops the kernel."""
        try:
            self._interrupt_quietly(kernel, cell)
        except KeyboardInterrupt:
            self._abandon(kernel)
            raise
        return time.monotonic()

    def _new_kernel(self, first: bytes) -> _Kernel:
        """A new kernel (3 requests), replacing the one there; its source and the ``first``
        request reach its stdin with the start gate's release."""
        if self._kernel is not None:
            self._stop(self._kernel)
            self._kernel = None
        kernel = _Kernel()
        kernel.process = _processes.start(
            self._usable_box(),
            self._command,
            stdin=None,
            max_output=0,
            text=True,  # the kernel's frames are lines of ASCII
            on_output=kernel.received,
            echo=None,
            first_input=_frames.boot_payload() + first,
        )
        self._kernel = kernel
        return kernel

    def _collect(
        self, kernel: _Kernel, cell: _Cell, limit: float, interrupted: float | None
    ) -> Execution:
        """Read the cell's frames until its end. Ctrl-C interrupts the cell in the sandbox
        (``interrupted``: when), waits for it to end there, then raises; a second one, or
        a cell that does not end within ``INTERRUPT_GRACE``, stops the kernel."""
        deadline = time.monotonic() + limit + min(TIMEOUT_GRACE, max(MIN_GRACE, limit))
        while True:
            try:
                done = self._step(kernel, cell, limit, deadline, interrupted)
            except KeyboardInterrupt:
                if interrupted is not None:
                    self._abandon(kernel)
                    raise
                interrupted = self._interrupt(kernel, cell)
                continue
            if done is not None:
                if interrupted is not None:
                    raise KeyboardInterrupt
                return done

    def _step(
        self, kernel: _Kernel, cell: _Cell, limit: float, deadline: float, interrupted: float | None
    ) -> Execution | None:
        """Take one frame (or notice the kernel's end, or a time limit); the cell's
        ``Execution`` once it ended."""
        try:
            item = kernel.frames.get(timeout=0.05)
        except queue.Empty:
            if not kernel.running and kernel.frames.empty():
                return self._died(kernel, cell)
            now = time.monotonic()
            if interrupted is not None and now > interrupted + INTERRUPT_GRACE:
                raise KeyboardInterrupt from None  # it did not stop: the kernel is stopped
            if now > deadline:
                self._abandon(kernel)
                return cell.stopped_after_timeout(limit)
            return None
        if isinstance(item, BaseException):
            self._abandon(kernel)
            raise item
        try:
            if item.token == cell.token and cell.take(item):
                return cell.execution()
        except ProtocolError:  # what a cell can write over the kernel's own channel
            self._abandon(kernel)
            raise
        return None

    def _died(self, kernel: _Kernel, cell: _Cell) -> Execution:
        """The kernel ended under the cell: why, as the cell's error; the next cell restarts."""
        assert kernel.process is not None
        self._lost = True
        result = kernel.process.wait(0)  # raises OutputLostError if its output was lost
        if self._closed:
            raise LeaseClosed("the code context was closed while the cell ran")
        if self._usable_box().closing.is_set():
            raise LeaseClosed("the lease closed while the cell ran")
        if result.exit_code is not None:
            how = f"exited with status {result.exit_code}"
        else:
            how = f"was killed by {result.signal or 'a signal'}"
        said = "\n".join(
            log_line(line, 200) for line in kernel.stderr.splitlines()[-5:] if line.strip()
        )
        value = (
            f"the interpreter {how} during this cell; the next cell starts a new one, "
            "without what earlier cells defined" + (f"\n{said}" if said else "")
        )
        return cell.execution(ExecutionError("InterpreterDied", value, value))

    @staticmethod
    def _interrupt_quietly(kernel: _Kernel, cell: _Cell) -> None:
        """Interrupt the cell (1 request), if its kernel still runs; a refusal is logged (a
        kernel ending meanwhile is the next frame's news)."""
        if kernel.process is not None and kernel.running:
            try:
                kernel.process.send(_frames.request("interrupt", cell.token))
            except CreateosError as exc:
                log.warning("could not interrupt the cell: %s", exc)

    def _abandon(self, kernel: _Kernel) -> None:
        """Stop a kernel that cannot go on (1 request, confirmed); the next cell restarts."""
        self._lost = True
        self._stop(kernel)
        if self._kernel is kernel:
            self._kernel = None

    @staticmethod
    def _stop(kernel: _Kernel) -> None:
        if kernel.process is not None and kernel.process.running:
            kernel.process.terminate(grace=1.0)

    def close(self) -> None:
        """Stop the interpreter (1 request while it runs); closing twice is harmless.

        From another thread, it does not wait for a running cell: that cell's
        ``run_code`` raises ``LeaseClosed``.
        """
        self._closed = True
        kernel = self._kernel
        if kernel is not None and not self._usable_box_closing():
            self._stop(kernel)  # a running cell ends with it, and lets go of the lock
        with self._lock:  # and one started meanwhile, if any
            kernel, self._kernel = self._kernel, None
            if kernel is not None and not self._usable_box_closing():
                self._stop(kernel)

    def _usable_box_closing(self) -> bool:
        try:
            return self._usable_box().closing.is_set()
        except LeaseClosed:
            return True

    def __enter__(self) -> CodeContext:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._kernel else "not started")
        return f"<CodeContext {state}>"


class _Cell:
    """One cell's frames as they arrive: output kept (bounded) and streamed, results, end."""

    def __init__(self, token: str, max_output: int, on_output: OnCodeOutput | None) -> None:
        self.token = token
        self.on_output = on_output
        self.restarted = False
        self.interrupted_at_send = False
        self.started = time.monotonic()
        self.kept = {"stdout": TailBuffer(max_output), "stderr": TailBuffer(max_output)}
        self.decoders = {
            name: codecs.getincrementaldecoder("utf-8")("replace") for name in self.kept
        }
        self.results: list[Result] = []
        self.end: dict[str, Any] = {}

    def take(self, frame: _frames.Frame) -> bool:
        """Handle one of the cell's frames; True at its end."""
        if frame.kind in ("out", "err"):
            stream = "stdout" if frame.kind == "out" else "stderr"
            self.kept[stream].write(frame.payload)
            text = self.decoders[stream].decode(frame.payload)
            if text and self.on_output is not None:
                self.on_output(stream, text)
        elif frame.kind == "res":
            message = _json_object(frame.payload)
            data = message.get("data")
            if not isinstance(data, dict):
                raise ProtocolError("the interpreter sent a result without its formats")
            result = Result.from_bundle(data, main=message.get("main") is True)
            self.results.append(result)
            if self.on_output is not None:
                self.on_output("result", result)
        elif frame.kind == "end":
            self.end = _json_object(frame.payload)
            return True
        else:
            raise ProtocolError("the interpreter sent a frame of an unknown kind")
        return False

    def execution(self, error: ExecutionError | None = None) -> Execution:
        if error is None and isinstance(self.end.get("error"), dict):
            found = self.end["error"]
            error = ExecutionError(
                str(found.get("name")), str(found.get("value")), str(found.get("traceback"))
            )
        count = self.end.get("count")
        return Execution(
            results=self.results,
            stdout=self.kept["stdout"].getvalue(),
            stderr=self.kept["stderr"].getvalue(),
            error=error,
            duration=time.monotonic() - self.started,
            timed_out=bool(self.end.get("timed_out")),
            restarted=self.restarted,
            truncated=self.kept["stdout"].truncated or self.kept["stderr"].truncated,
            execution_count=count if isinstance(count, int) else None,
        )

    def stopped_after_timeout(self, limit: float) -> Execution:
        value = (
            f"the cell ran past its timeout of {limit:g} s and did not stop at KeyboardInterrupt: "
            "its interpreter was stopped, and the next cell starts a new one"
        )
        execution = self.execution(ExecutionError("TimeoutError", value, value))
        return execution.__class__(**{**_fields(execution), "timed_out": True})


def _fields(execution: Execution) -> dict[str, Any]:
    return attrs.asdict(execution, recurse=False)


def _json_object(payload: bytes) -> dict[str, Any]:
    try:
        found = json.loads(payload)
    except ValueError:
        raise ProtocolError("the interpreter sent a frame that is not JSON") from None
    if not isinstance(found, dict):
        raise ProtocolError("the interpreter sent a frame that is not a JSON object")
    return found
