"""A writable layer over the read-only host system, for bubblewrap sandboxes (overlayfs).

On the service a sandbox's whole tree is writable, and a template keeps
whatever its ``RUN`` steps wrote anywhere. bubblewrap 0.10 has ``--overlay``
options for that, but the bubblewrap most distributions ship does not, so
the emulator mounts the overlays itself. Each layered sandbox has one
*holder*: a small process (``unshare`` running ``sh``) that owns a private
mount namespace (and a user namespace, when the emulator is not root) in
which the root and each system directory (``/usr``, ``/etc``, ``/var``...) is
an overlayfs mount: its lower layers are the template layers the sandbox
was made from, then the host's directory (or, for the root, a skeleton of
mount points and symlinks); its upper layer is the sandbox's ``layer/``
directory. Each command enters that namespace (``nsenter``) and bubblewrap
binds those mounts in place. One overlay per sandbox, however many
processes: what one writes, the next sees. The holder exits when the pipe
to its stdin closes (destroy, emulator close, or the emulator's death).

Where it cannot work (no overlayfs, no ``unshare``/``nsenter``, no user
namespaces), the probe at start says so and sandboxes get no layer.

In a user namespace (an unprivileged emulator) the overlay cannot change
host files owned by other users (most of ``/usr`` and ``/etc``): new files
and directories work, edits of those do not.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import select
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path

log = logging.getLogger("createos_sync.emulator")

ROOT_KEY = "_root"
UPPER = "layer"
PRIVATE = (".layer-work", ".layer-mnt", ".layer-skeleton")
HOLDER_TIMEOUT = 10.0
FORBIDDEN_IN_PATHS = frozenset(",:\\\n")

# Mount each overlay given as (options, target) pairs, say so, then live until stdin closes.
HOLDER_SCRIPT = """\
set -e
while [ "$#" -gt 0 ]; do mount -t overlay overlay -o "$1" "$2"; shift 2; done
echo ready
exec cat >/dev/null
"""


def locate(upper: Path, lowers: Sequence[Path], sandbox_path: str) -> str:
    """Where ``sandbox_path`` lives in the topmost layer holding it, else on the host."""
    parts = sandbox_path.strip("/").split("/", 1)
    for layer in (upper, *lowers):
        direct = layer / ROOT_KEY / sandbox_path.strip("/")
        nested = layer / parts[0] / (parts[1] if len(parts) > 1 else "")
        for candidate in (nested, direct):
            if parts[0] and os.path.lexists(candidate):
                return str(candidate)
    return sandbox_path


def copy_tree(source: Path, target: Path) -> None:
    """Copy a storage tree, overlay whiteouts (0/0 character devices) and xattrs included.

    The layer's private directories (work dirs, mount points) are not copied.
    GNU ``cp -a`` does it several times faster than Python (and instantly where
    the file system has reflinks); Python's copy is the fallback.
    """
    target.mkdir(parents=True, exist_ok=True)
    names = [n for n in os.listdir(source) if n not in PRIVATE]
    if names and _CP is not None:
        sources = [str(source / name) for name in names]
        done = subprocess.run([_CP, "-a", "--reflink=auto", "--", *sources, str(target)],
                              capture_output=True, check=False)  # fmt: skip
        if done.returncode == 0:
            return
        log.warning("cp could not copy %s (%s): copying with Python", source, done.returncode)
    for name in names:
        _python_copy(source / name, target / name)


def _python_copy(source: Path, target: Path) -> None:
    def copy(src: str, dst: str) -> object:
        mode = os.lstat(src).st_mode
        if stat.S_ISCHR(mode):
            os.mknod(dst, mode, os.lstat(src).st_rdev)  # a whiteout: unprivileged since Linux 5.8
            return dst
        return shutil.copy2(src, dst)

    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, target, symlinks=True, copy_function=copy, dirs_exist_ok=True)
    else:
        copy(str(source), str(target))


_CP = shutil.which("cp") if os.path.exists("/proc/self") else None


def remove_tree(path: Path) -> None:
    """``rmtree`` that also removes overlayfs work dirs (mode 000 once used)."""
    for directory, subdirectories, _ in os.walk(path):
        for name in subdirectories:
            place = os.path.join(directory, name)
            if not os.path.islink(place):  # a link may point at a host directory
                with contextlib.suppress(OSError):
                    os.chmod(place, 0o700)
    shutil.rmtree(path, ignore_errors=True)


class Overlays:
    """How sandboxes get their layer: which directories, and in which namespaces."""

    def __init__(
        self, system_dirs: Sequence[str], *, user_namespace: bool, mount_files: Sequence[str] = ()
    ) -> None:
        self.system_dirs = tuple(system_dirs)
        self.mount_files = tuple(mount_files)
        self.targets = tuple(d for d in system_dirs if os.path.isdir(d) and not os.path.islink(d))
        # The system's top-level symlinks (/bin -> usr/bin), kept in every layered root.
        self.links = {d: os.readlink(d) for d in system_dirs if os.path.islink(d)}
        self.user_namespace = user_namespace
        self._holders: dict[Path, Future[subprocess.Popen[bytes]]] = {}
        self._lock = threading.Lock()

    def bind_args(self, root: Path) -> list[str]:
        """bubblewrap's binds of the layered root and system directories (after ``enter``)."""
        mounts = root / ".layer-mnt"
        args = ["--bind", str(mounts / ROOT_KEY), "/"]
        for target in self.targets:
            args += ["--bind", str(mounts / _key(target)), target]
        return args

    def prepare(self, root: Path, lowers: Sequence[Path], *, wait: bool) -> None:
        """Mount the sandbox's layer, in the background unless ``wait``. Commands are all
        started by one thread: a command must never wait there for its layer, delaying
        every other sandbox's, so the layer is mounted at creation and waited for before."""
        future = self._holder(root, lowers, background=True)
        if wait:
            future.result(HOLDER_TIMEOUT)

    def enter(self, root: Path, lowers: Sequence[Path]) -> list[str]:
        """The command prefix that runs a program in the sandbox's layered namespace."""
        holder = self._holder(root, lowers, background=False).result(HOLDER_TIMEOUT)
        prefix = ["nsenter", f"--target={holder.pid}", "--mount"]
        if self.user_namespace:
            prefix += ["--user", "--preserve-credentials"]
        return [*prefix, "--"]

    def open_place(self, root: Path, lowers: Sequence[Path], path: str) -> tuple[int, str]:
        """(Descriptor of an overlay, path below it) of a sandbox path outside the MOUNTS,
        for the files API: opened through the holder's mount namespace, where it is mounted."""
        holder = self._holder(root, lowers, background=False).result(HOLDER_TIMEOUT)
        mount, below = self.mounted_at(root, path)
        fd = os.open(f"/proc/{holder.pid}/root{mount}", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        if holder.poll() is not None:  # gone: its pid may name another process by now
            os.close(fd)
            raise OSError("the sandbox's layer is not mounted")
        return fd, below

    def mounted_at(self, root: Path, path: str) -> tuple[str, str]:
        """(Path of an overlay in the holder's namespace, path below it) of a sandbox path
        outside the MOUNTS."""
        top = "/" + path.strip("/").split("/")[0]
        if top in self.links:  # as the sandbox resolves it: /bin/x is /usr/bin/x
            below = path[len(top) :].strip("/")
            path = posixpath.normpath(posixpath.join("/", self.links[top], below))
            top = "/" + path.strip("/").split("/")[0]
        key, below = (_key(top), path[len(top) :]) if top in self.targets else (ROOT_KEY, path)
        return f"{root}/.layer-mnt/{key}", below.strip("/")

    def release(self, root: Path) -> None:
        """Unmount the sandbox's layer (its holder exits); its files stay."""
        with self._lock:
            future = self._holders.pop(root, None)
        if future is not None and future.done() and future.exception() is None:
            _stop(future.result())  # one still starting is stopped by _fill

    def close(self) -> None:
        with self._lock:
            roots = list(self._holders)
        for root in roots:
            self.release(root)

    def _holder(
        self, root: Path, lowers: Sequence[Path], *, background: bool
    ) -> Future[subprocess.Popen[bytes]]:
        """The future of the sandbox's holder; a new one if there is none, or it died."""
        with self._lock:
            future = self._holders.get(root)
            if future is not None and not _dead(future):
                return future
            future = self._holders[root] = Future()
        if background:
            threading.Thread(target=self._fill, args=(future, root, lowers), daemon=True).start()
        else:
            self._fill(future, root, lowers)
        return future

    def _fill(
        self, future: Future[subprocess.Popen[bytes]], root: Path, lowers: Sequence[Path]
    ) -> None:
        try:
            holder = self._start(root, lowers)
        except Exception as exc:
            future.set_exception(exc)
            return
        with self._lock:
            released = self._holders.get(root) is not future
        if released:  # the sandbox went away while its layer was being mounted
            _stop(holder)
            future.set_exception(OSError("the sandbox's layer was released"))
        else:
            future.set_result(holder)

    def _start(self, root: Path, lowers: Sequence[Path]) -> subprocess.Popen[bytes]:
        skeleton = root / ".layer-skeleton"
        _make_skeleton(skeleton, self.system_dirs, self.mount_files)
        pairs: list[str] = []
        for key, host in [(ROOT_KEY, str(skeleton)), *((_key(t), t) for t in self.targets)]:
            upper, work, mount = (root / d / key for d in (UPPER, ".layer-work", ".layer-mnt"))
            for directory in (upper, work, mount):
                directory.mkdir(parents=True, exist_ok=True)
            below = [str(layer / key) for layer in lowers if (layer / key).is_dir()]
            options = f"lowerdir={':'.join([*below, host])},upperdir={upper},workdir={work}"
            if self.user_namespace:
                options += ",userxattr"
            pairs += [options, str(mount)]
        if any(c in FORBIDDEN_IN_PATHS for c in "".join(pairs[1::2]) + str(root)):
            raise OSError("the sandbox's storage path cannot be used in overlay options")
        unshare = ["unshare", "--mount", "--propagation", "private"]
        if self.user_namespace:
            unshare += ["--user", "--map-root-user"]
        holder = subprocess.Popen(
            [*unshare, "sh", "-c", HOLDER_SCRIPT, "holder", *pairs],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert holder.stdout is not None
        ready, _, _ = select.select([holder.stdout], [], [], HOLDER_TIMEOUT)
        if not ready or holder.stdout.readline() != b"ready\n":
            _stop(holder)
            raise OSError("the sandbox's overlay could not be mounted")
        return holder


def _dead(future: Future[subprocess.Popen[bytes]]) -> bool:
    if not future.done():
        return False
    return future.exception() is not None or future.result().poll() is not None


def _key(target: str) -> str:
    return target.strip("/").replace("/", "_")


def _make_skeleton(skeleton: Path, system_dirs: Sequence[str], files: Sequence[str]) -> None:
    """The root's lowest layer: the host's top-level symlinks, and mount points.

    ``files`` are the files bubblewrap binds (the status reporter): their
    mount points must exist below, or bubblewrap would create them in the
    sandbox's own layer, and every fork and template would carry them.
    """
    for name in ("workspace", "tmp", "home/user", "dev", "proc"):
        (skeleton / name).mkdir(parents=True, exist_ok=True)
    for name in files:
        place = skeleton / name.strip("/")
        place.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        place.touch(exist_ok=True)
    for path in system_dirs:
        place = skeleton / path.strip("/")
        if os.path.islink(path) and not os.path.lexists(place):
            place.symlink_to(os.readlink(path))
        elif os.path.isdir(path) and not os.path.islink(path):
            place.mkdir(exist_ok=True)


def _stop(holder: subprocess.Popen[bytes]) -> None:
    for pipe in (holder.stdin, holder.stdout, holder.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    try:
        holder.wait(HOLDER_TIMEOUT)
    except subprocess.TimeoutExpired:
        holder.kill()
        holder.wait()


def probe(
    system_dirs: Sequence[str], bwrap: str, mount_files: Sequence[str] = ()
) -> Overlays | None:
    """Overlays that work here (a write through them lands in the layer), else None."""
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        return None
    overlays = Overlays(system_dirs, user_namespace=os.geteuid() != 0, mount_files=mount_files)
    with tempfile.TemporaryDirectory(prefix="createos-emulator-layer-probe-") as tmp:
        root = Path(tmp)
        try:
            prefix = overlays.enter(root, ())
            argv = [*prefix, bwrap, *overlays.bind_args(root), "--dev", "/dev", "--proc",
                    "/proc", "--", "/bin/sh", "-c", "echo ok > /.probe"]  # fmt: skip
            done = subprocess.run(argv, capture_output=True, timeout=HOLDER_TIMEOUT)
            works = done.returncode == 0 and (root / UPPER / ROOT_KEY / ".probe").is_file()
        except (OSError, subprocess.SubprocessError):
            works = False
        finally:
            overlays.close()
            remove_tree(root / ".layer-work")
    return overlays if works else None
