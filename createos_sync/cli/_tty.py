"""The local terminal: its size and its changes, and raw mode that is always undone.

In raw mode every key reaches the remote terminal as typed (Ctrl-C is byte
3, not SIGINT here) and nothing is echoed or translated locally: the remote
terminal does both. The saved mode is put back on the way out of the block,
whatever the way out (the shell's exit, an exception, a signal turned into
one); a terminal that has gone away (SIGHUP) cannot be restored, and that is
not an error.
"""

from __future__ import annotations

import contextlib
import os
import signal
import termios
import threading
from collections.abc import Callable, Iterator
from types import FrameType

from ..process import DEFAULT_SIZE, DEFAULT_TERM, Size

_IFLAG, _OFLAG, _CFLAG, _LFLAG, _CC = 0, 1, 2, 3, 6
DEFERRED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def window_size(fd: int) -> Size:
    """``(rows, cols)`` of the terminal on ``fd``; 80x24 when it does not say."""
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return DEFAULT_SIZE
    if size.lines <= 0 or size.columns <= 0:
        return DEFAULT_SIZE
    return size.lines, size.columns


def local_term() -> dict[str, str]:
    """TERM for a remote terminal shown on this one: this terminal's type."""
    return {"TERM": os.environ.get("TERM") or DEFAULT_TERM}


@contextlib.contextmanager
def forwarding_resizes(fd: int, resize: Callable[[int, int], None]) -> Iterator[None]:
    """Within the block, each change of the window size on ``fd`` goes to ``resize(rows, cols)``.

    ``resize`` is called from a thread of its own, with the size read when it
    runs, so that changes arriving together are passed on once. SIGWINCH only
    wakes that thread, through a pipe: a signal handler must not take a lock
    that the main thread it interrupted may hold. Outside the main thread
    (where no signal handler can be set) sizes are not followed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)

    def resized(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(OSError):  # full: already said; closed: nobody listens
            os.write(wake_w, b".")

    def forward() -> None:
        try:
            while os.read(wake_r, 4096):  # b"": the block has ended
                resize(*window_size(fd))
        finally:
            os.close(wake_r)

    previous = signal.signal(signal.SIGWINCH, resized)
    threading.Thread(target=forward, name="createos-resizes", daemon=True).start()
    try:
        yield
    finally:
        signal.signal(signal.SIGWINCH, previous)  # before the pipe closes under the handler
        os.close(wake_w)


@contextlib.contextmanager
def raw_mode(fd: int) -> Iterator[None]:
    """The terminal on ``fd`` in raw mode within the block, its own mode restored after."""
    saved = termios.tcgetattr(fd)
    raw = [*saved[:_CC], list(saved[_CC])]
    raw[_IFLAG] &= ~(
        termios.BRKINT | termios.ICRNL | termios.INPCK | termios.ISTRIP | termios.IXON
        | termios.INLCR | termios.IGNCR | termios.PARMRK | termios.IGNBRK
    )  # fmt: skip
    raw[_OFLAG] &= ~termios.OPOST
    raw[_CFLAG] = (raw[_CFLAG] & ~(termios.CSIZE | termios.PARENB)) | termios.CS8
    raw[_LFLAG] &= ~(termios.ECHO | termios.ECHONL | termios.ICANON | termios.ISIG | termios.IEXTEN)
    raw[_CC][termios.VMIN] = 1
    raw[_CC][termios.VTIME] = 0
    termios.tcsetattr(fd, termios.TCSADRAIN, raw)
    try:
        yield
    finally:
        # A termination signal now would raise before the mode is back:
        # it waits until then.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, DEFERRED)
        try:
            with contextlib.suppress(termios.error, OSError):
                termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
