"""Pseudo-terminals for terminal processes (``pty: {rows, cols}``).

A terminal process gets a fresh pty pair: the slave is its stdin, stdout and
stderr, the emulator keeps the master, reads the output from it (stream
``pty``: the terminal merges stdout and stderr) and writes input to it. The
process must also be the session leader with the slave as its controlling
terminal, so that the kernel does what a terminal does: Ctrl-C typed as input
becomes SIGINT for the foreground process group, and a resize (TIOCSWINSZ on
the master) sends it SIGWINCH.

The reporter (``reporter --terminal``) does it in the child it forks for
the command, in both modes: as the namespace's PID 1 under bubblewrap, and
as the subreaper without isolation (which itself stays in a session of its
own, so it still finds every descendant). Only when bubblewrap runs without
the reporter (this interpreter is not visible in the sandbox) does
``ctty`` do it, just before exec'ing bubblewrap, whose session the
command then shares. The leader was started in a new session, and the slave
was opened by the emulator with O_NOCTTY, so no session holds it before.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import sys
import termios
from pathlib import Path

MAX_SIDE = 0xFFFF  # struct winsize holds unsigned shorts
STREAM = "pty"

# The helper that takes the terminal when no reporter runs (a file: see its docstring).
CTTY_HELPER = str(Path(__file__).resolve().with_name("ctty.py"))


def with_controlling_tty(argv: list[str]) -> list[str]:
    """``argv`` run by a helper that first makes stdin (the slave) the controlling tty."""
    return [sys.executable, "-I", "-S", CTTY_HELPER, *argv]


def open_terminal(rows: int, cols: int) -> tuple[int, int]:
    """A new pty pair (master, slave) of the given size, with the kernel's default modes."""
    master, slave = os.openpty()  # glibc opens the slave with O_NOCTTY
    try:
        set_size(master, rows, cols)
    except OSError:
        os.close(master)
        os.close(slave)
        raise
    return master, slave  # both non-inheritable; Popen hands the slave over as 0, 1, 2


def set_size(master: int, rows: int, cols: int) -> None:
    """Resize the terminal; the kernel sends SIGWINCH to its foreground process group."""
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def read_output(fd: int, size: int) -> bytes:
    """Read output; b"" at its end, which for a pty master is once no process holds the slave.

    Linux answers EIO on a master, not end of file, when the last slave
    descriptor closes.
    """
    try:
        return os.read(fd, size)
    except OSError as exc:
        if exc.errno == errno.EIO:
            return b""
        raise
