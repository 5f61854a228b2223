"""How a sandbox command is launched: inside bubblewrap, or as a plain child.

bubblewrap mode builds a small root: the host's system directories read-only,
the sandbox's storage at ``/workspace``, ``/tmp`` and ``/home/user``, fresh
``/dev`` and ``/proc``, and a PID namespace, so that a command sees the same
paths as on the service and its whole tree can be found and killed. The
network is the host's.

Plain mode only moves the working directory, HOME and TMPDIR into the
sandbox's storage: a command that names ``/workspace`` reaches the HOST's
``/workspace``.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ._storage import MOUNTS, Storage

log = logging.getLogger("createos_sync.emulator")

BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SYSTEM_DIRS = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
    "/etc", "/opt", "/root", "/var", "/srv",
)  # fmt: skip
PROBE_TIMEOUT = 10.0


@dataclass(frozen=True)
class Launch:
    """What to hand to ``subprocess.Popen`` for one command."""

    argv: list[str]
    cwd: str
    env: dict[str, str]


class NoIsolation:
    """Plain child processes whose cwd, HOME and TMPDIR live in the storage."""

    name = "none"
    reports_status = False

    def launch(
        self,
        storage: Storage,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        status_fd: int | None,
    ) -> Launch:
        base = {
            "PATH": BASE_PATH,
            "HOME": str(storage.dir("/home/user")),
            "TMPDIR": str(storage.dir("/tmp")),
            "LANG": "C.UTF-8",
        }
        return Launch(argv, storage.view(cwd), {**base, **env})


class Bubblewrap:
    """Each command in its own bubblewrap PID namespace over the sandbox's storage."""

    name = "bwrap"
    reports_status = True

    def __init__(self, executable: str) -> None:
        self._bwrap = executable

    def launch(
        self,
        storage: Storage,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        status_fd: int | None,
    ) -> Launch:
        cmd = [self._bwrap, "--die-with-parent", "--unshare-pid"]
        if status_fd is not None:
            cmd += ["--json-status-fd", str(status_fd)]
        for path in SYSTEM_DIRS:
            if os.path.islink(path):
                cmd += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                cmd += ["--ro-bind", path, path]
        for mount, _ in MOUNTS:
            cmd += ["--bind", str(storage.dir(mount)), mount]
        cmd += ["--dev", "/dev", "--proc", "/proc", "--chdir", cwd, "--", *argv]
        base = {"PATH": BASE_PATH, "HOME": "/home/user", "LANG": "C.UTF-8"}
        return Launch(cmd, str(storage.root), {**base, **env})


Isolation = NoIsolation | Bubblewrap


def _bwrap_works(executable: str) -> bool:
    with tempfile.TemporaryDirectory(prefix="createos-emulator-probe-") as tmp:
        storage = Storage(Path(tmp))
        storage.create()
        launch = Bubblewrap(executable).launch(storage, ["true"], "/workspace", {}, None)
        try:
            done = subprocess.run(
                launch.argv,
                cwd=launch.cwd,
                env=launch.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=PROBE_TIMEOUT,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return done.returncode == 0


def choose(mode: str) -> Isolation:
    """The isolation for ``mode`` ("auto", "bwrap" or "none"), probing bubblewrap."""
    if mode != "none":
        executable = shutil.which("bwrap")
        if executable is not None and _bwrap_works(executable):
            return Bubblewrap(executable)
        if mode == "bwrap":
            raise RuntimeError("isolation='bwrap' was asked for, but bubblewrap does not work here")
        log.warning("bubblewrap is unavailable or does not work here: falling back to none")
    log.warning(
        "emulator processes run WITHOUT isolation: commands see the host file system, "
        "and absolute paths such as /workspace refer to the host"
    )
    return NoIsolation()
