"""The X display of one emulated desktop screen: an Xvfb on the first free number.

The standard library only: the desktop agent runs with ``python3 -I -S`` inside
the sandbox and receives this module's source as an argument (``desktop_agent``).
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

START_TIMEOUT = 10.0
MAX_DISPLAYS = 200
X_DIR = "/" + "tmp"  # spelled so: plain mode rewrites sandbox paths in a command's words
QUIET: dict[str, Any] = dict.fromkeys(("stdin", "stdout", "stderr"), subprocess.DEVNULL)


def start_server(width: int, height: int, fbdir: str) -> tuple[subprocess.Popen[bytes], str]:
    """An Xvfb on the first free display number (a killed server's lock is taken over),
    on its socket file only: no abstract socket (the host's network may be shared), no TCP."""
    for number in range(MAX_DISPLAYS):
        if _alive(_lock_pid(number)):
            continue  # another display's (a race for it is decided by Xvfb's lock)
        argv = ["Xvfb", f":{number}", "-screen", "0", f"{width}x{height}x24", "-fbdir", fbdir]
        argv += ["-nolisten", "tcp", "-nolisten", "local", "-nocursor", "-noreset"]
        server = subprocess.Popen(argv, **QUIET)
        deadline = time.monotonic() + START_TIMEOUT
        while server.poll() is None and time.monotonic() < deadline:
            # Ours only once it holds the lock: until then, another server may answer there.
            if _lock_pid(number) == server.pid and _answers(f":{number}"):
                return server, f":{number}"
            time.sleep(0.02)
        if server.poll() is None:  # neither up nor refused in time: give up
            server.kill()
            server.wait()
            break
    raise OSError("the virtual display (Xvfb) did not start")


def _lock_pid(number: int) -> int | None:
    try:
        with open(f"{X_DIR}/.X{number}-lock", encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int | None) -> bool:
    try:
        if pid is not None:
            os.kill(pid, 0)
        return pid is not None
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's


def _answers(display: str) -> bool:
    """Whether the X server accepts clients (its socket exists a moment before it does)."""
    env = {**os.environ, "DISPLAY": display}
    probe = ["xdotool", "getdisplaygeometry"]
    return subprocess.run(probe, env=env, capture_output=True).returncode == 0
