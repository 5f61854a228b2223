"""The lease journal's file mechanics: its record lock, waited for with a patience, and
new private files beside it (written, then renamed over the journal).

See ``journal`` for why the lock is a POSIX record lock (``lockf``), not ``flock``.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from ..config import lock_record, new_beside


def wait_for_lock(fd: int, patience: float) -> None:
    """Take the record lock, waiting at most ``patience`` seconds.

    A holder that died released it (the kernel drops record locks); one that
    is alive but stopped (SIGSTOP, a debugger) must not block every other
    process's ``open()`` and ``close()`` for ever: past the patience this is an
    ``OSError``, which ``add`` turns into a refusal to create and the other
    updates into a warning (the entry stays for ``reap``).
    """
    if os.name != "posix":  # pragma: no cover - Windows: single-writer best effort
        return
    if not lock_record(fd, patience):
        raise BlockingIOError(
            errno.EAGAIN, f"its lock was held by another process for more than {patience:g} s"
        )


def new_private_file(directory: Path) -> tuple[int, str]:
    """A new file only we can read, beside the journal, open for writing (as ``mkstemp``).

    Not ``tempfile``: its first use in a process takes a module lock outside the
    ``try`` that releases it, so a Ctrl-C landing there (a journal write lets
    interrupts act: see ``Record.add``) leaves the lock held, and the next write,
    the failed ``open()`` forgetting its entry, waited on it for ever, holding the
    journal's record lock, which then blocked every other process's leases too.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    path, fd = new_beside(str(directory / "leases"), ".tmp", lambda p: os.open(p, flags, 0o600))
    return fd, path
