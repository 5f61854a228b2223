"""Terminal processes: the ``pty=`` argument, and what a terminal needs that a pipe does not.

A process created with ``pty: {rows, cols}`` runs on a pseudo-terminal in
the sandbox: one output stream (``pty``, delivered as ``"stdout"``), input
that is *typed* (the terminal's line discipline echoes it, and turns Ctrl-C
into SIGINT), and a size that can change.
"""

from __future__ import annotations

import os

import attrs

from .command import Command

DEFAULT_SIZE = (24, 80)  # rows, cols: the classic 80x24
MAX_SIDE = 0xFFFF  # the kernel's struct winsize holds unsigned shorts
# Programs that draw (editors, pagers, progress bars) need TERM; the user's
# own env wins.
DEFAULT_TERM = "xterm-256color"
EOF_KEY = b"\x04"  # Ctrl-D: the end of input for a program reading lines

Size = tuple[int, int]


def terminal_size(pty: object) -> Size | None:
    """``pty=`` as ``(rows, cols)``, or None for no terminal; raises before any request.

    ``True`` is 80x24; ``(rows, cols)`` is taken as given, and an
    ``os.terminal_size`` (which lists columns first) is read by its names.
    """
    if pty is None or pty is False:
        return None
    if pty is True:
        return DEFAULT_SIZE
    if isinstance(pty, os.terminal_size):
        return checked_size(pty.lines, pty.columns)
    if isinstance(pty, (tuple, list)) and len(pty) == 2:
        return checked_size(pty[0], pty[1])
    raise TypeError("pty must be True, False, None or (rows, cols)")


def checked_size(rows: object, cols: object) -> Size:
    """Validate a terminal size: two ints in 1..65535."""
    return _side("rows", rows), _side("cols", cols)


def _side(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"terminal {name} must be an int")
    if not 1 <= value <= MAX_SIDE:
        raise ValueError(f"terminal {name} must be in 1..{MAX_SIDE}, not {value}")
    return value


def on_terminal(command: Command) -> Command:
    """``command`` with TERM set for a terminal, unless the user's env sets it."""
    if "TERM" in command.env:
        return command
    return attrs.evolve(command, env={"TERM": DEFAULT_TERM, **command.env})
