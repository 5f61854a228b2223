"""The desktop of a ``desktop:1`` sandbox: an agent inside it, driven over its pipes.

The agent (``desktop_agent``, run by the sandbox's own python) starts a
virtual X display (Xvfb) with a window manager (openbox) and does every
computer-use action with the X tools, inside the sandbox: whatever a
sandboxed command does to its display (replacing the X server, planting a
socket) can only reach that sandbox, never the host's own display. It is a
managed process of the sandbox, of a kind the processes API does not show,
so pause freezes it and destroy kills it like any other; it starts with
the first computer-use request (a desktop costs nothing until it is used).

Each request is one JSON line on the agent's stdin, answered by one JSON
line on its stdout, read from the process's output journal: a reader is
attached for the exchange, so that nothing of the answer can be evicted
before it is read, and detached after it, so that an idle desktop keeps no
reader (an attached reader would keep the sandbox from ever auto-pausing).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from .._wire import ApiError
from .journal import Aborted, End, Frame, Journal, OffsetExpired, Reader
from .processes import ManagedProcess, StdinClosed

ROOTFS = "desktop:1"
DEFAULT_SIZE = (1024, 768)
ANSWER_TIMEOUT = 60.0
# Typing: xdotool's own pace (12 ms a character) for what it types within TYPE_BUDGET; a
# longer text faster, down to no pause at all. A pace the caller asks for is kept, or
# refused before anything is typed if it takes too long. Measured on 2 loaded cores (load
# 14): 4 ms a character at 2 ms apart, 0.65 ms at none (100,000 characters in 65 s).
TYPE_DELAY_MS = 12
TYPE_BUDGET_MS = 10_000
MAX_TYPING_MS = 60_000
TOOL_TIMEOUT = 20.0  # the agent's own, for one X tool
# The program each desktop needs, and the Debian/Ubuntu package that provides it.
TOOLS = {
    "Xvfb": "xvfb",
    "openbox": "openbox",
    "xdotool": "xdotool",
    "wmctrl": "wmctrl",
    "xwininfo": "x11-utils",  # window geometry as screenshots see it
    "xclip": "xclip",
    "xterm": "xterm",  # the image's terminal: what a user launches first
    "python3": "python3",
}
AGENT = Path(__file__).with_name("desktop_agent.py")
LAUNCHER = Path(__file__).with_name("desktop_launcher.py")  # how the agent starts applications
IMAGE = Path(__file__).with_name("desktop_image.py")  # how the agent encodes screenshots
DISPLAY = Path(__file__).with_name("desktop_display.py")  # how the agent starts Xvfb
KIND = "desktop"  # a process kind the processes API never lists


def missing_packages() -> list[str]:
    """The packages to install before a desktop can run here (none: it can)."""
    return sorted({package for tool, package in TOOLS.items() if shutil.which(tool) is None})


def require_tools() -> None:
    """Refuse (400) a desktop sandbox where its programs are not installed, naming them."""
    missing = missing_packages()
    if missing:
        raise ApiError(
            400,
            f"rootfs {ROOTFS} needs programs this emulator's machine lacks: "
            f"apt-get install {' '.join(missing)}",
        )


class Desktop:
    """The agent process of one sandbox and the exchanges with it, one at a time."""

    def __init__(self, process: ManagedProcess) -> None:
        self.process = process
        self._lock = threading.Lock()
        self._ids = iter(range(1, 1 << 62))

    @property
    def alive(self) -> bool:
        return not self.process.done

    def wait_ready(self, reader: Reader) -> None:
        """Until the agent says its first screen runs (or why it does not)."""
        self._read_answer(reader, 0)

    def ask(self, request: dict[str, Any], *, timeout: float = ANSWER_TIMEOUT) -> Any:
        """Send one request; the agent's ``data``, or its refusal as an ``ApiError``."""
        with self._lock:
            request_id = next(self._ids)
            reader = _attach_at_end(self.process.journal)
            try:
                line = json.dumps({**request, "id": request_id}) + "\n"
                try:
                    self.process.write_input(line.encode())
                except StdinClosed:
                    raise ApiError(500, "the desktop stopped") from None
                return self._read_answer(reader, request_id, timeout)
            finally:
                reader.close()

    def _read_answer(self, reader: Reader, request_id: int, timeout: float = ANSWER_TIMEOUT) -> Any:
        buffer = b""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            item = reader.next(max(0.0, remaining))
            if isinstance(item, (End, Aborted)) or (item is None and remaining <= 0):
                raise ApiError(500, "the desktop stopped or does not answer")
            if not isinstance(item, Frame) or item.stream != "stdout":
                continue  # evicted diagnostics, or the agent's stderr: not an answer
            buffer += item.data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                answer = _decode(line)
                if answer is None or answer.get("id", 0) != request_id:
                    continue  # a late answer to a request that timed out
                if answer.get("ok") is True:
                    return answer.get("data")
                raise ApiError(_status(answer.get("status")), str(answer.get("message", "")))


def typing_pace(length: int, asked_ms: int) -> tuple[int, float]:
    """(Milliseconds between characters, seconds the agent allows xdotool) to type ``length``
    characters; ``asked_ms`` 0 lets the emulator choose. A 400 before anything is typed if
    the asked pace takes longer than MAX_TYPING_MS."""
    if asked_ms and length * asked_ms > MAX_TYPING_MS:
        raise ApiError(
            400,
            f"typing {length} characters {asked_ms} ms apart takes over "
            f"{MAX_TYPING_MS // 1000} s: send less text or a smaller delay_in_ms",
        )
    delay = asked_ms or min(TYPE_DELAY_MS, TYPE_BUDGET_MS // max(length, 1))
    # A short sleep takes up to three times its length on a loaded machine; sending a
    # character up to 2 ms more.
    return delay, TOOL_TIMEOUT + length * (3 * delay + 2) / 1000


def _attach_at_end(journal: Journal) -> Reader:
    """A reader of what the agent writes from now on (its older diagnostics may be evicted
    meanwhile: then from where the journal starts)."""
    try:
        return journal.attach(journal.stats().newest_seq)
    except OffsetExpired as expired:
        return journal.attach(expired.oldest_seq - 1)


def _decode(line: bytes) -> dict[str, Any] | None:
    try:
        answer = json.loads(line)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _status(value: object) -> int:
    return value if isinstance(value, int) and 400 <= value <= 599 else 500
