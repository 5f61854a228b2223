"""The interpreter that runs in the sandbox: this file's source is sent there and executed.

It needs the sandbox's ``python3`` (3.8 or later) and its standard library only,
so it never imports ``createos_sync``. It reads requests on its stdin, one line
each (base64 of JSON), and answers on its stdout with frames, one line each:
``TOKEN KIND BASE64``, where TOKEN is the cell's, chosen by the client. The cell's
own stdout and stderr (Python's ``sys.stdout`` and file descriptors 1 and 2 of
anything it starts) are captured and framed, so nothing a cell prints can pass
for a frame: the end marker, ``TOKEN end ...``, is the kernel's alone. Its stdin
is ``/dev/null``: a cell reading it gets EOF.

Kinds: ``out`` / ``err`` (bytes written), ``res`` (a result: a JSON mime bundle),
``end`` (JSON: the error, if any, and whether a timeout interrupted the cell). A
kind ending in ``+`` is continued by the next frame of the same kind (a payload
over ``PIECE`` bytes): no line comes near the service's 1 MiB limit.

Requests: ``{"op": "run", "token", "code", "timeout"}`` runs a cell;
``{"op": "interrupt", "token"}`` raises ``KeyboardInterrupt`` in the cell that
has this token, if it still runs (a timeout does the same from here); for the
cell that ended last, it sends that cell's end again (the client, interrupted as
it took the end, waits for it).

An interrupt is a SIGINT to the main thread, sent again until the cell raised its
``KeyboardInterrupt`` or ended: one that lands after Python's last check for signals
and before a blocking call (``time.sleep``) is not seen until that call returns, and
one that lands in the kernel's own code (a frame half written) is let pass.
"""

from __future__ import annotations

import ast
import base64
import builtins
import io
import json
import linecache
import os
import queue
import select
import signal
import sys
import threading
import time
import traceback
import types
from typing import Any

from ._kernel_display import RESULT_LIMIT, Figures, Formatter, ImportHooks  # joined in the sandbox

PIECE = 48 * 1024  # raw bytes per frame: base64 makes it 64 KiB, far under 1 MiB a line
FLUSH_SECONDS = 0.05  # how long printed text may wait in the buffer before it is sent
PENDING_LIMIT = 1024 * 1024  # output between cells (from threads), kept for the next cell
RESEND_FIRST, RESEND_MOST = 0.01, 0.5  # seconds between SIGINTs until the interrupt is seen


class Wire:
    """The protocol descriptors, and the one lock that keeps each frame whole."""

    def __init__(self) -> None:
        self.out = os.dup(1)  # the process's real stdout: frames only
        self.requests = os.fdopen(os.dup(0), "rb")
        self.lock = threading.Lock()
        self.token = "-"  # the running cell's, else "-": idle
        self.pending: list[tuple[str, bytes]] = []
        self.pending_size = 0
        self.dropped = 0  # bytes beyond PENDING_LIMIT: the next cell says how many
        self.ended: tuple[str, bytes] = ("-", b"")  # the last cell's token and end
        self.pid = os.getpid()

    def frame(self, kind: str, payload: bytes, token: str | None = None) -> None:
        """Send ``payload`` under ``kind``, in pieces; output while no cell runs waits."""
        with self.lock:
            token = token or self.token
            if token == "-":  # between cells (a thread printing): for the next cell
                if self.pending_size < PENDING_LIMIT:
                    self.pending.append((kind, payload))
                    self.pending_size += len(payload)
                else:
                    self.dropped += len(payload)
                return
            self._write(token, kind, payload)

    def _write(self, token: str, kind: str, payload: bytes) -> None:
        pieces = [payload[i : i + PIECE] for i in range(0, len(payload), PIECE)] or [b""]
        for number, piece in enumerate(pieces):
            more = "+" if number < len(pieces) - 1 else ""
            line = f"{token} {kind}{more} ".encode() + base64.b64encode(piece) + b"\n"
            view = memoryview(line)
            while view:
                view = view[os.write(self.out, view) :]

    def begin(self, token: str) -> None:
        with self.lock:
            self.token = token
            pending, self.pending, self.pending_size = self.pending, [], 0
            for kind, payload in pending:
                self._write(token, kind, payload)
            if self.dropped:
                note = f"[createos: {self.dropped} bytes written between cells were dropped]\n"
                self._write(token, "err", note.encode())
                self.dropped = 0

    def finish(self, end: dict[str, Any]) -> None:
        with self.lock:
            token, self.token = self.token, "-"
            self.ended = (token, json.dumps(end).encode())
            self._write(token, "end", self.ended[1])

    def end_again(self, token: str) -> None:
        with self.lock:
            if token != "-" and self.ended[0] == token:
                self._write(token, "end", self.ended[1])

    def after_fork(self) -> None:
        """A forked child must never hang on a lock its parent's thread held."""
        self.lock = threading.Lock()


class CapturedStream(io.TextIOBase):
    """``sys.stdout`` / ``sys.stderr`` of cells: text buffered briefly, then framed."""

    def __init__(self, wire: Wire, kind: str, name: str) -> None:
        super().__init__()
        self.wire, self.kind, self.name = wire, kind, name
        self.pending = bytearray()
        self.lock = threading.Lock()
        self.since = 0.0
        self.unbuffered = False
        self.buffer = Binary(self)  # sys.stdout.buffer.write(b"...")

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return 1 if self.kind == "out" else 2

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.put(text.encode("utf-8", "surrogateescape"))
        return len(text)

    def put(self, data: bytes) -> None:
        with self.lock:
            if not self.pending:
                self.since = time.monotonic()
            self.pending += data
            full = len(self.pending) >= PIECE or self.unbuffered
        if full:
            self.flush()

    def flush(self) -> None:
        with self.lock:
            data, self.pending = bytes(self.pending), bytearray()
        if data:
            self.wire.frame(self.kind, data)

    def due(self) -> bool:
        return bool(self.pending) and time.monotonic() - self.since >= FLUSH_SECONDS

    def after_fork(self) -> None:
        self.lock = threading.Lock()
        self.unbuffered = True  # no pump thread in a child: each write goes out at once


class Binary(io.RawIOBase):
    """``sys.stdout.buffer``: bytes written as they are."""

    def __init__(self, stream: CapturedStream) -> None:
        super().__init__()
        self.stream = stream

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        data = bytes(data)
        self.stream.put(data)
        return len(data)

    def flush(self) -> None:
        self.stream.flush()


class Pump:
    """Frames what file descriptors 1 and 2 receive (subprocesses, C code), and flushes
    the buffered ``sys.stdout`` / ``sys.stderr`` text, from a thread."""

    def __init__(self, wire: Wire, streams: list[CapturedStream]) -> None:
        self.wire, self.streams = wire, streams
        self.pipes: dict[int, str] = {}
        for fd, kind in ((1, "out"), (2, "err")):
            read, write = os.pipe()
            os.set_blocking(read, False)
            os.dup2(write, fd)
            os.close(write)
            self.pipes[read] = kind
        self.lock = threading.Lock()

    def start(self) -> None:
        threading.Thread(target=self._run, name="createos-kernel-pump", daemon=True).start()

    def _run(self) -> None:
        while True:
            ready, _, _ = select.select(list(self.pipes), [], [], FLUSH_SECONDS)
            if ready:  # what Python printed before, first: the order the cell wrote in
                for stream in self.streams:
                    stream.flush()
                self.drain()
            for stream in self.streams:
                if stream.due():
                    stream.flush()

    def drain(self) -> None:
        """Frame every byte the pipes hold now (the main thread calls it at a cell's end)."""
        with self.lock:
            for fd, kind in self.pipes.items():
                while True:
                    try:
                        data = os.read(fd, PIECE)
                    except BlockingIOError:
                        break
                    if not data:
                        break
                    self.wire.frame(kind, data)

    def flush_all(self) -> None:
        for stream in self.streams:
            stream.flush()
        self.drain()


class Kernel:
    """One interpreter: the user's namespace, the running cell, the display machinery."""

    def __init__(self) -> None:
        self.wire = Wire()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        self.stdout = CapturedStream(self.wire, "out", "<stdout>")
        self.stderr = CapturedStream(self.wire, "err", "<stderr>")
        self.pump = Pump(self.wire, [self.stdout, self.stderr])
        sys.stdin = open(os.devnull)  # noqa: SIM115 (the cells' stdin, for good)
        sys.stdout, sys.stderr = self.stdout, self.stderr
        self.main = sys.modules["__main__"]
        for name in [n for n in vars(self.main) if not n.startswith("__")]:
            delattr(self.main, name)  # the bootstrap's own names
        self.namespace = vars(self.main)
        builtins.__dict__["display"] = self.display  # as IPython does
        self.count = 0
        self.running: str | None = None
        self.queued: set[str] = set()  # cells read, not started: an interrupt cancels them
        self.cancelled: set[str] = set()
        self.armed: str | None = None  # the cell owed a KeyboardInterrupt, until it is raised
        self.in_cell = False  # the cell's own code runs (the main thread is inside exec/eval)
        self.state = threading.Lock()
        self.requests: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.figures = Figures(lambda obj: self.show(obj, main=False))
        self.formatter = Formatter(self.report, self.figures)
        sys.meta_path.insert(0, ImportHooks(self.figures, self.display))
        os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        for part in (self.wire, self.stdout, self.stderr):
            part.after_fork()

    # --- the loop ----------------------------------------------------------

    def serve(self) -> None:
        signal.signal(signal.SIGINT, self._on_sigint)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # only cells see it
        self.pump.start()
        threading.Thread(target=self._read, name="createos-kernel-requests", daemon=True).start()
        while True:
            request = self.requests.get()
            if request is None:
                return  # stdin closed: the client is gone
            self.run(request)

    def _read(self) -> None:
        for line in self.wire.requests:
            try:
                request = json.loads(base64.b64decode(line))
            except ValueError:
                continue
            if request.get("op") == "interrupt":
                self.interrupt(request.get("token"))
            elif request.get("op") == "run":
                with self.state:
                    self.queued.add(str(request.get("token")))
                self.requests.put(request)
        self.requests.put(None)

    def interrupt(self, token: object) -> None:
        with self.state:
            if token in self.queued:
                self.cancelled.add(str(token))
                return
            runs = token is not None and token == self.running
            if runs:
                self.armed = str(token)
        if not runs:
            self.wire.end_again(str(token))
            return
        threading.Thread(target=self._deliver, args=(token,), daemon=True).start()

    def _deliver(self, token: str) -> None:
        """SIGINT the main thread until the cell raised the interrupt or ended (see above)."""
        pause = RESEND_FIRST
        while True:
            with self.state:
                if self.armed != token or self.running != token:
                    return
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
            if signal.getsignal(signal.SIGINT) != self._on_sigint:
                return  # the cell's own handler: it gets one SIGINT, as from a keyboard
            time.sleep(pause)
            pause = min(pause * 2, RESEND_MOST)

    def _on_sigint(self, _signum: int, frame: types.FrameType | None) -> None:
        """Raise the owed ``KeyboardInterrupt`` in a cell's code; elsewhere (between cells,
        under the kernel's own code: a frame being written) let the signal pass:
        ``_deliver`` sends it again."""
        if self.armed is None or self.armed != self.running or not self.in_cell:
            return
        if not _in_cell_code(frame):
            return
        self.armed = None
        raise KeyboardInterrupt

    # --- one cell ----------------------------------------------------------

    def run(self, request: dict[str, Any]) -> None:
        token, code = str(request["token"]), str(request["code"])
        timeout = request.get("timeout")
        self.count += 1
        self.wire.begin(token)
        timer, timed_out = None, threading.Event()
        if isinstance(timeout, (int, float)) and timeout > 0:

            def expire() -> None:
                timed_out.set()
                self.interrupt(token)

            timer = threading.Timer(timeout, expire)
            timer.daemon = True
            timer.start()
        error = None
        with self.state:
            self.queued.discard(token)
            cancelled = token in self.cancelled
            self.cancelled.discard(token)
            self.running = None if cancelled else token
        try:
            error = _describe(KeyboardInterrupt(), "") if cancelled else self.execute(code)
        finally:
            with self.state:
                self.running = self.armed = None
            if timer is not None:
                timer.cancel()
            _discard_pending_interrupt()
        if os.getpid() != self.wire.pid:  # a forked child came back here: it is not the kernel
            self.pump.flush_all()
            os._exit(0)
        try:
            self.figures.flush()
        except Exception as exc:  # a figure that cannot draw: reported, the cell's result stands
            self.report("the figure", exc)
        self.pump.flush_all()
        end = {"error": error, "timed_out": timed_out.is_set(), "count": self.count}
        self.wire.finish(end)

    def execute(self, code: str) -> dict[str, Any] | None:
        """Run the cell with ``SIGINT`` let through; the error as the client reports it."""
        filename = f"<cell {self.count}>"
        lines = code.splitlines(keepends=True)
        linecache.cache[filename] = (len(code), None, lines, filename)
        try:
            try:
                self.in_cell = True
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
                body, last = _split(code, filename)
                exec(body, self.namespace)
                if last is not None:
                    value = eval(last, self.namespace)
                    if value is not None and not code.rstrip().endswith(";"):
                        self.namespace["_"] = value
                        self.show(value, main=True)
            finally:
                self.in_cell = False
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        except BaseException as exc:  # the cell's, reported; SystemExit included, as IPython
            if isinstance(exc, SystemExit) and exc.code in (None, 0):
                return None
            return _describe(exc, filename)
        return None

    # --- results -----------------------------------------------------------

    def display(self, *objects: Any, **_options: Any) -> None:
        """``display(obj, ...)``: each object as a rich result, in order with the output."""
        for obj in objects:
            self.show(obj, main=False)

    def show(self, obj: Any, *, main: bool) -> None:
        self.pump.flush_all()
        bundle = self.formatter.bundle(obj)
        payload = json.dumps({"data": bundle, "main": main}).encode()
        if len(payload) > RESULT_LIMIT:
            note = f"[a result of {len(payload)} bytes: over {RESULT_LIMIT}, not sent]"
            payload = json.dumps({"data": {"text/plain": note}, "main": main}).encode()
        self.wire.frame("res", payload)

    def report(self, what: str, exc: BaseException) -> None:
        self.stderr.write(f"{what} failed: {type(exc).__name__}: {exc}\n")
        self.stderr.flush()


_KERNEL_FILE = Kernel.execute.__code__.co_filename  # "<createos-kernel>" in the sandbox


def _in_cell_code(frame: types.FrameType | None) -> bool:
    """Whether a cell's code runs here with none of the kernel's between it and ``frame``
    (a library the cell calls: yes; one the kernel's display or writing calls: no)."""
    while frame is not None:
        name = frame.f_code.co_filename
        if name == _KERNEL_FILE:
            return False
        if name.startswith("<cell "):
            return True
        frame = frame.f_back
    return False


def _split(code: str, filename: str) -> tuple[types.CodeType, types.CodeType | None]:
    """The cell compiled, its last statement apart when it is an expression (its value)."""
    tree = ast.parse(code, filename, "exec")
    last = None
    final = tree.body[-1] if tree.body else None
    if isinstance(final, ast.Expr):
        tree.body.pop()
        last = compile(ast.Expression(final.value), filename, "eval", dont_inherit=True)
    return compile(tree, filename, "exec", dont_inherit=True), last


def _describe(exc: BaseException, filename: str) -> dict[str, Any]:
    """The error's name, text and traceback, without the kernel's own frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    if isinstance(exc, SyntaxError):
        lines = traceback.format_exception_only(type(exc), exc)
    else:
        lines = traceback.format_exception(type(exc), exc, tb)
    name = type(exc).__qualname__
    module = type(exc).__module__
    if module not in ("builtins", "__main__"):
        name = f"{module}.{name}"
    try:
        value = str(exc)
    except Exception:
        value = f"<{type(exc).__name__}: str() failed>"
    return {"name": name, "value": value, "traceback": "".join(lines)}


def _discard_pending_interrupt() -> None:
    """An interrupt that came as the cell ended must not hit the next one."""
    while signal.SIGINT in signal.sigpending():
        signal.sigtimedwait({signal.SIGINT}, 0)


def main() -> None:
    Kernel().serve()
