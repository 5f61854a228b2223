"""Which catalog bases a template build can honour here: it runs on this machine's system.

An emulator sandbox runs this machine's own programs whatever its root file
system is called, so an Ubuntu base means "this machine's system". A base
that promises a language's version (``python-3.12``, ``node-22``) is honoured
only when this machine's ``python3`` / ``node`` is that version: a template
``FROM python-3.12`` must not quietly run Python 3.11. Each program is asked
its version once per process.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess

from .._machine.isolation import BASE_PATH
from .catalog import ROOTFS_NAMES

PROBE_TIMEOUT = 10.0

# base -> (program, what the base promises, the pattern its --version output must match)
PROMISES = {
    "python-3.12": ("python3", "Python 3.12", re.compile(r"Python 3\.12(?!\d)")),
    "node-22": ("node", "Node.js 22", re.compile(r"v22\.")),
}


def broken_promise(rootfs: str) -> str | None:
    """Why ``rootfs`` cannot be honoured here ("promises Python 3.12, but ..."), or None."""
    if rootfs not in PROMISES:
        return None
    program, promise, pattern = PROMISES[rootfs]
    found = version(program)
    if found is not None and pattern.search(found):
        return None
    here = f"its {program} is {found}" if found else f"it has no {program}"
    return f"{rootfs} promises {promise}, but the emulator builds on this machine's system: {here}"


def honoured() -> list[str]:
    """The catalog bases a build can honour here."""
    return [name for name in ROOTFS_NAMES if broken_promise(name) is None]


@functools.cache
def version(program: str) -> str | None:
    """The first line of ``program --version`` (as a sandbox finds it on its PATH), or None."""
    executable = shutil.which(program, path=BASE_PATH)
    if executable is None:
        return None
    try:
        done = subprocess.run(
            [executable, "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=PROBE_TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0][:80] if lines else None
