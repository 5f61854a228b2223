"""How a sandbox command is launched: inside bubblewrap, or as a plain child.

bubblewrap mode builds a small root: the host's system directories read-only,
the sandbox's storage at ``/workspace``, ``/tmp`` and ``/home/user``, fresh
``/dev`` and ``/proc``, and a PID namespace, so that a command sees the same
paths as on the service and its whole tree can be found and killed. The
network is the sandbox's own where ``_netns`` can make one (the spawner
starts every command inside it), else the host's. When this interpreter is
visible inside that root, ``reporter`` (bind-mounted as a file) runs as the
namespace's PID 1 so that the command's exact wait status (signal or exit
code) reaches the emulator.

Where overlayfs works (``_layers``, probed at start), the root and the
system directories are a writable layer instead of read-only binds: what a
command writes anywhere is kept in the sandbox's storage, forks copy it, and
templates are made of it. Without it they stay read-only, as before.

Run as root, the emulator gives sandboxes a user namespace with users in it
(``userns``): root there can add users and run commands as them, with that
namespace's capabilities alone; elsewhere root keeps no capability and is
alone in its namespace.

Plain mode (no bubblewrap) runs the command under ``reporter --subreaper``,
which keeps every descendant in the tree and reports the exact wait status.
It moves the working directory, HOME and TMPDIR into the sandbox's storage,
and rewrites the sandbox paths ``/workspace``, ``/tmp`` and ``/home/user``
where they start a word of the command's arguments (a shell script's words
included), its working directory and environment values, so that ``cat
/workspace/in.txt`` reads what the files API wrote, while a program's own
text (``python3 -c "print('/tmp/x')"``) is left as written. What it gives
up: a path that a program builds or reads at run time (from its code, a
file, ``$PWD``...) still means the host's. It never touches
the host's own ``/workspace``.

A terminal process (``terminal=True``) must be a session leader with its pty
as controlling tty: the reporter (``--terminal``) does it in the child it
forks for the command; see ``_terminal``.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import userns as _userns
from .diskbind import has_bind_fd, mounter_argv, mounter_works, open_binds
from .layers import Overlays
from .layers import probe as probe_overlays
from .storage import MOUNTS, Layered, OverlayAt, Storage
from .terminal import with_controlling_tty

log = logging.getLogger("createos_sync.emulator")

BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SYSTEM_DIRS = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
    "/etc", "/opt", "/root", "/var", "/srv",
)  # fmt: skip
PROBE_TIMEOUT = 10.0
# The reporter runs from its file (``ps`` then shows the user's command, not its source);
# bubblewrap mounts that file at REPORTER_MOUNT.
REPORTER = str(Path(__file__).resolve().with_name("reporter.py"))
REPORTER_MOUNT = "/run/createos-emulator/reporter.py"


def sandbox_paths_pattern(mounts: Iterable[str]) -> re.Pattern[str]:
    """A sandbox path where a shell word starts (after a blank, "=", ":", a redirection or a
    separator, maybe in quotes), and not part of a longer path or name: clearly a path
    argument. Inside a word ("print('/tmp/x')" in a program's own code) it is left alone.
    Groups: the opening quote, if any, and the mount."""
    alternatives = "|".join(re.escape(m) for m in sorted(mounts, key=len, reverse=True))
    return re.compile(rf"(?:^|(?<=[\s=:<>;&|`]))([\"']?)({alternatives})(?![\w.-])")


SANDBOX_PATH = sandbox_paths_pattern(mount for mount, _ in MOUNTS)

PLAIN_MODE_WARNING = (
    "sandbox commands run directly on this machine, WITHOUT isolation: they can read and "
    "change your files. /workspace, /tmp and /home/user mean the sandbox's only where a "
    "command's arguments, working directory or environment name them as a path; a path "
    "that a program opens by itself (from its code or a file, or typed into a terminal) "
    "means this machine's. Install bubblewrap (apt-get install bubblewrap) for sandboxes "
    "that behave like the service's."
)
SHELL_SAFE = re.compile(r"[\w./-]+")
# Run as root (or, unprivileged, as root of the layer's user namespace), bubblewrap keeps
# every capability in the sandbox: with CAP_DAC_READ_SEARCH a command opens any host file by
# handle, with CAP_SYS_ADMIN it remounts its read-only binds. Root there keeps uid 0 (it owns
# what it writes) but no capability, and where the kernel allows it (the emulator being
# root) lives in a user namespace of its own, whose mounts it cannot unlock.
NO_CAPABILITIES = ["--cap-drop", "ALL"]
USERNS_ARGS = ["--unshare-user", "--uid", "0", "--gid", "0"]
COPIES = ".etc"  # a sandbox's own copies of /etc files (``copy_over``), in its storage


@dataclass(frozen=True)
class Launch:
    """What to hand to ``subprocess.Popen`` for one command; ``fds`` (the disks' directories)
    are passed to it, and closed by the caller once it started (or failed to)."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    fds: tuple[int, ...] = ()
    kept_fds: tuple[int, ...] = ()  # passed too, never closed: the emulator's user namespace


class NoIsolation:
    """Plain child processes under a subreaper; sandbox paths rewritten into the storage."""

    name = "none"
    namespaced = False
    overlays = None  # plain processes write on the host: no layer of their own

    def launch(
        self,
        storage: Storage,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        status_fds: tuple[int, int],
        *,
        terminal: bool = False,
    ) -> Launch:
        """The subreaper reports on ``status_fds[1]`` (``[0]`` is bubblewrap's: unused here).
        Raises SubPathRefused (an OSError) for a disk's sub path swapped for a link."""
        for bind in storage.binds.values():
            bind.check()
        base = {
            "PATH": BASE_PATH,
            "HOME": str(storage.dir("/home/user")),
            "TMPDIR": str(storage.dir("/tmp")),
            "LANG": "C.UTF-8",
        }
        mapped = {k: _sandbox_paths(v, storage) for k, v in env.items()}
        helper = [sys.executable, "-I", "-S", REPORTER, "--subreaper", str(os.getpid())]
        helper += ["--terminal"] if terminal else []
        command = [_sandbox_paths(word, storage) for word in argv]
        argv = [*helper, str(status_fds[1]), *command]
        return Launch(argv, storage.view(cwd), {**base, **mapped})

    def layered(self, storage: Storage) -> Layered | None:
        """No layer: the files API serves the MOUNTS only."""
        return None

    def copied(self) -> tuple[str, ...]:
        """No file of a plain sandbox is its own copy."""
        return ()

    def prepare(self, storage: Storage, *, wait: bool = False) -> None:
        """Nothing is mounted for a plain sandbox."""

    def release(self, storage: Storage) -> None:
        """Nothing is mounted for a plain sandbox."""

    def close(self) -> None:
        """Nothing to unmount."""


def _sandbox_paths(text: str, storage: Storage) -> str:
    """``text`` with each sandbox path in it replaced by its storage directory on the host.

    Only when every storage directory is made of characters that need no
    quoting in a shell script (true of the emulator's own temporary root).
    """
    dirs = {mount: str(storage.dir(mount)) for mount, _ in MOUNTS}
    dirs.update((mount, str(bind.path)) for mount, bind in storage.binds.items())  # disks
    if not all(SHELL_SAFE.fullmatch(d) for d in dirs.values()):
        return text
    pattern = sandbox_paths_pattern(dirs) if storage.binds else SANDBOX_PATH
    # A host path of the emulator's storage (what `pwd` shows, given back) stays as it is,
    # although it may start with /tmp.
    storage_root = f"{storage.root.parent}/"

    def mapped(match: re.Match[str]) -> str:
        quote, path = match.group(1), match.group(2)
        if text.startswith(storage_root, match.start(2)):
            return match.group(0)
        return quote + dirs[path]

    return pattern.sub(mapped, text)


class Bubblewrap:
    """Each command in its own bubblewrap PID namespace over the sandbox's storage."""

    name = "bwrap"
    namespaced = True

    @property
    def reports_wait_status(self) -> bool:
        return self._python is not None

    def __init__(
        self,
        executable: str,
        python: str | None,
        *,
        userns: bool = False,
        users: int | None = None,
    ) -> None:
        self._bwrap = executable
        self._python = python
        self._userns = userns  # root only: root inside a user namespace of its own
        # Binds a disk by its descriptor (else by /proc/self/fd/N: the same directory).
        self.bind_fd = has_bind_fd(executable)
        self._users = users  # root only: a user namespace with users in it (``userns``)
        self.overlays: Overlays | None = None  # set once probed: a writable layer
        self._copies: dict[str, str] = {}

    def copy_over(self, target: str, text: str) -> None:
        """Give every sandbox its own copy of ``text`` at ``target`` (``netns``): what one
        sandbox writes there, no other sandbox sees."""
        self._copies[target] = text

    def copied(self) -> tuple[str, ...]:
        """The paths every sandbox has its own copy of (bound over the image's file)."""
        return tuple(self._copies)

    def layered(self, storage: Storage) -> Layered | None:
        """How the files API reaches the rest of the sandbox's tree (its layer, and the
        sandbox's own copies of /etc files), if it has a layer."""
        if self.overlays is None:
            return None
        overlays = self.overlays

        def open_place(path: str) -> tuple[int, str]:
            if path in self._copies:
                copy = _own_copy(storage, path, self._copies[path])
                return os.open(copy.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC), copy.name
            return overlays.open_place(storage.root, storage.lowers, path)

        return open_place

    def prepare(self, storage: Storage, *, wait: bool = False) -> None:
        """Mount a sandbox's layer: at creation in the background, before a command in full."""
        if self.overlays is not None:
            self.overlays.prepare(storage.root, storage.lowers, wait=wait)

    def release(self, storage: Storage) -> None:
        """Unmount the sandbox's layer (destroyed, or about to become a template)."""
        if self.overlays is not None:
            self.overlays.release(storage.root)

    def close(self) -> None:
        if self.overlays is not None:
            self.overlays.close()
        if self._users is not None:
            os.close(self._users)
            self._users = None

    @property
    def has_users(self) -> bool:
        """Whether root in a sandbox can add users and become them (``userns``)."""
        return self._users is not None

    def launch(
        self,
        storage: Storage,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        status_fds: tuple[int, int],
        *,
        terminal: bool = False,
    ) -> Launch:
        """bubblewrap reports the child's pid on ``status_fds[0]``, the reporter the command's
        wait status on ``status_fds[1]``; the namespace then outlives the command while
        anything it started runs (without the reporter, bubblewrap's init ends it). Raises
        SubPathRefused (an OSError) for a disk's sub path swapped for a link: each disk is
        bound by the descriptor opened beneath it."""
        layered = self.layered(storage)
        for mount in sorted(storage.binds):  # outer ones first: an inner one is made in them
            storage.make_mount_point(mount, layered)  # a clear refusal, before any process
        if storage.binds and self._mounts_disks():  # closes the race the check leaves
            plan = storage.disk_mounts(self._overlay_at(storage))
            return self._launch(storage, argv, cwd, env, status_fds, [], plan, terminal=terminal)
        disks = open_binds(storage.binds)
        try:
            return self._launch(storage, argv, cwd, env, status_fds, disks, terminal=terminal)
        except BaseException:
            for fd, _ in disks:
                os.close(fd)
            raise

    def _mounts_disks(self) -> bool:
        """Whether ``diskmount`` can mount the disks in a namespace of its own. Else
        bubblewrap binds them, as the emulator says once (their mount points checked just
        before: see RELIABILITY.md for the window that leaves)."""
        return mounter_works()

    def _overlay_at(self, storage: Storage) -> OverlayAt | None:
        overlays = self.overlays
        return None if overlays is None else functools.partial(overlays.mounted_at, storage.root)

    def _launch(
        self,
        storage: Storage,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        status_fds: tuple[int, int],
        disks: list[tuple[int, str]],
        mounted: list[dict[str, Any]] | None = None,
        *,
        terminal: bool,
    ) -> Launch:
        cmd = [self._bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc"]
        if self._users is not None:  # users, and the capabilities of their namespace alone
            cmd += [*_userns.capability_args(), "--userns", str(self._users)]
        else:
            cmd += NO_CAPABILITIES + (USERNS_ARGS if self._userns else [])
        cmd += ["--json-status-fd", str(status_fds[0])]
        if mounted is not None:  # the disks, mounted by descriptor before bubblewrap starts
            cmd = mounter_argv(mounted) + cmd
        if self.overlays is not None:
            # The layered root already holds the host's top-level symlinks.
            cmd = self.overlays.enter(storage.root, storage.lowers) + cmd
            cmd += self.overlays.bind_args(storage.root)
        else:
            cmd += _read_only_system()
        for target, text in self._copies.items():
            cmd += ["--bind", str(_own_copy(storage, target, text)), target]
        for mount, _ in MOUNTS:
            cmd += ["--bind", str(storage.dir(mount)), mount]
        for disk in mounted or ():  # with no tree around them: bound from their stage
            if disk["base"].get("staged"):
                cmd += ["--bind", disk["base"]["path"], disk["mount"]]
        for fd, mount in disks:
            cmd += ["--bind-fd", str(fd), mount] if self.bind_fd else [
                "--bind", f"/proc/self/fd/{fd}", mount
            ]  # fmt: skip
        # /proc/sys read-only: root's uid may write many sysctls without any capability.
        cmd += ["--dev", "/dev", "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]
        cmd += ["--chdir", cwd]
        if self._python is not None:
            # bubblewrap closes its status fd in the sandbox: the reporter
            # writes to a second descriptor of the same pipe. For a terminal,
            # it makes the command a session leader owning the pty.
            reporter = [self._python, "-I", "-S", REPORTER_MOUNT]
            reporter += ["--terminal"] if terminal else []
            reporter += [str(status_fds[1])]
            cmd += ["--ro-bind", REPORTER, REPORTER_MOUNT, "--as-pid-1", "--", *reporter, *argv]
        else:
            cmd += ["--", *argv]
            if terminal:  # no reporter: bubblewrap's own session owns the pty
                cmd = with_controlling_tty(cmd)
        base = {"PATH": BASE_PATH, "HOME": "/home/user", "LANG": "C.UTF-8"}
        kept = () if self._users is None else (self._users,)
        return Launch(cmd, str(storage.root), {**base, **env}, tuple(fd for fd, _ in disks), kept)


def _own_copy(storage: Storage, target: str, text: str) -> Path:
    """The sandbox's own file for ``target``, made on its first command."""
    copy = storage.root / COPIES / target.strip("/").replace("/", "_")
    if not copy.exists():
        copy.parent.mkdir(exist_ok=True)
        copy.write_text(text)
    return copy


def _read_only_system() -> list[str]:
    args = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


Isolation = NoIsolation | Bubblewrap


def _sandbox_python() -> str | None:
    """This interpreter's real path, if the sandbox's read-only system dirs show it."""
    real = os.path.realpath(sys.executable) if sys.executable else ""
    shown = [os.path.realpath(d) for d in SYSTEM_DIRS if os.path.isdir(d)]
    return real if real and any(real.startswith(d + "/") for d in shown) else None


def _works(bwrap: Bubblewrap) -> bool:
    with tempfile.TemporaryDirectory(prefix="createos-emulator-probe-") as tmp:
        storage = Storage(Path(tmp))
        storage.create()
        status_r, status_w = os.pipe()
        report_w = os.dup(status_w)
        launch = bwrap.launch(storage, ["true"], "/workspace", {}, (status_w, report_w))
        try:
            done = subprocess.run(
                launch.argv,
                cwd=launch.cwd,
                env=launch.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=PROBE_TIMEOUT,
                pass_fds=(status_w, report_w, *launch.fds, *launch.kept_fds),
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        finally:
            os.close(status_w)
            os.close(report_w)
            with os.fdopen(status_r, "rb") as status:
                reported = status.read()
        if bwrap.reports_wait_status and b"wait-status" not in reported:
            return False
        return done.returncode == 0


def choose(mode: str) -> Isolation:
    """The isolation for ``mode`` ("auto", "bwrap" or "none"), probing bubblewrap."""
    if mode != "none":
        executable = shutil.which("bwrap")
        python = _sandbox_python()
        candidates = []
        userns = (True, False) if os.geteuid() == 0 else (False,)
        users = _userns.make() if executable is not None else None
        if executable is not None:
            for reporter in (python, None) if python is not None else (None,):
                if users is not None:
                    candidates.append(Bubblewrap(executable, reporter, users=users))
                candidates += [Bubblewrap(executable, reporter, userns=u) for u in userns]
        for bwrap in candidates:
            if _works(bwrap):
                if users is not None and not bwrap.has_users:
                    os.close(users)
                    log.info("bubblewrap cannot join a user namespace with users here: "
                             "sandboxed root cannot add users nor become one")  # fmt: skip
                if os.geteuid() == 0 and not (bwrap._userns or bwrap.has_users):
                    log.info(
                        "bubblewrap cannot make user namespaces here: sandboxed root "
                        "keeps the host's uid 0, without any capability"
                    )
                if not bwrap.reports_wait_status:
                    log.info(
                        "bubblewrap runs without the status reporter: "
                        "a command killed by signal N may be reported as exit 128+N"
                    )
                bwrap.overlays = probe_overlays(
                    SYSTEM_DIRS, executable or "bwrap", (REPORTER_MOUNT,)
                )
                if bwrap.overlays is None:
                    log.info(
                        "overlayfs is unavailable here: sandboxes see the system read-only, "
                        "and templates keep only /workspace, /tmp and /home/user"
                    )
                return bwrap
        if users is not None:
            os.close(users)
        if mode == "bwrap":
            raise RuntimeError("isolation='bwrap' was asked for, but bubblewrap does not work here")
    why = "isolation 'none' was asked for" if mode == "none" else (
        "bubblewrap is not installed here, or does not work"
    )  # fmt: skip
    log.warning("%s: %s", why, PLAIN_MODE_WARNING)
    return NoIsolation()
