"""An emulator's temporary directories are removed when the emulator ends, even by ``kill -9``.

``Emulator.close()`` removes them itself (the root of its sandboxes, the
directory of its TLS CA), but a process killed with SIGKILL (or a notebook
kernel that died) runs no cleanup. So each emulator that made temporary
directories starts a janitor: a tiny shell in a session of its own (a Ctrl-C
or a signal to the emulator's process group does not reach it) that blocks
reading a pipe whose only write end the emulator holds. The kernel closes
that end when the emulator's process ends, however it ends; the read
returns, and the janitor removes the directories, retrying for a few seconds
while the sandboxes' processes die with their emulator (bubblewrap's
``--die-with-parent``, the plain-mode subreaper's parent-death signal).

Why a watcher rather than a sweep of stale roots at the next start: the
files go at once, and no later emulator has to guess which directories in a
shared temporary directory belong to a dead one.
"""

from __future__ import annotations

import contextlib
import os
import subprocess

# The arguments: the directories. Wait for EOF, then remove them, for up to 5 s while
# their processes die. chmod first: an overlayfs work dir (a sandbox's writable layer)
# is left mode 000.
SCRIPT = (
    'read -r _; i=0; while [ "$i" -lt 50 ]; do left=""; for d in "$@"; do '
    'chmod -R u+rwx -- "$d" 2>/dev/null; rm -rf -- "$d" 2>/dev/null; '
    '[ -e "$d" ] && left=1; done; [ -z "$left" ] && break; sleep 0.1; i=$((i + 1)); done'
)
RELEASE_TIMEOUT = 5.0


class Janitor:
    """Removes ``paths`` once this process closes the pipe: by ``release()``, or by dying."""

    def __init__(self, *paths: str) -> None:
        read_end, self._write_end = os.pipe()  # never inherited: only this process holds it
        try:
            self._proc = subprocess.Popen(
                ["/bin/sh", "-c", SCRIPT, "createos-emulator-janitor", *paths],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except BaseException:
            os.close(self._write_end)
            raise
        finally:
            os.close(read_end)

    def release(self) -> None:
        """The emulator is closing and removes the directories itself: let the janitor go."""
        with contextlib.suppress(OSError):
            os.close(self._write_end)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(RELEASE_TIMEOUT)
