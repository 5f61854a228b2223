"""A sandbox's storage directory and the mapping of sandbox paths onto it.

Three sandbox trees are storage directories: ``/workspace``, ``/tmp`` and
``/home/user``, mapped the same way in every isolation mode. Under
bubblewrap with overlays (``layers``), the rest of the tree a sandbox wrote
lives in ``layer/``, over ``lowers`` (the layers of the template it was made
from), and the files API reaches it through the mounted overlay (``Layered``),
as a command would; without a layer, paths outside the three are refused.
Files are opened beneath the tree's directory (``beneath``): a symlink or a
directory swapped by a sandboxed command cannot make the API read or write a
host file, however the two race. (A symlink is followed only while it stays
below: an absolute one, such as a link to ``/workspace/x`` made inside
bubblewrap, is refused.) A disk's sub path follows no link at all
(``diskbind``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import os
import posixpath
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .beneath import open_base, open_beneath, open_directory
from .diskbind import DiskBind, SubPathRefused
from .layers import UPPER, copy_tree, locate, remove_tree

MOUNTS = (("/workspace", "workspace"), ("/tmp", "tmp"), ("/home/user", "home"))
CHUNK = 1 << 20
NOT_KEPT = frozenset({"proc", "dev", "sys"})  # mounted afresh for every command
# Where a path outside MOUNTS lives: (descriptor of a host directory, path below it).
Layered = Callable[[str], tuple[int, str]]
# Where a path outside MOUNTS lives in a sandbox's layer: (its overlay's path, path below it).
OverlayAt = Callable[[str], tuple[str, str]]
STAGE = ".disk-stage"  # where disks with no tree around them are mounted first (diskmount)


class PathRefused(Exception):
    """A sandbox path that the files API does not serve; ``status`` is 400 or 403."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Storage:
    """Directories ``workspace/``, ``tmp/`` and ``home/`` under ``root``, and the disks' binds."""

    def __init__(self, root: Path, lowers: tuple[Path, ...] = ()) -> None:
        self.root = root
        self.lowers = lowers  # template layers under this sandbox's own, topmost first
        # Persistent disks: mount path -> the bucket's directory and the sub path in it.
        self.binds: dict[str, DiskBind] = {}

    @property
    def layer(self) -> Path:
        """This sandbox's writable layer (the overlays' upper directories)."""
        return self.root / UPPER

    def create(self) -> None:
        for _, name in MOUNTS:
            (self.root / name).mkdir(parents=True, exist_ok=True)

    def copy_to(self, other: Storage) -> None:
        copy_tree(self.root, other.root)

    def seed_from(self, template_root: Path) -> None:
        """Start the storage trees as a template's (its layer is a lower, not copied)."""
        for _, name in MOUNTS:
            if (template_root / name).is_dir():
                remove_tree(self.root / name)
                copy_tree(template_root / name, self.root / name)

    def remove(self) -> None:
        remove_tree(self.root)

    def dir(self, mount: str) -> Path:
        """Host directory of one of the MOUNTS (by sandbox path)."""
        return self.root / dict(MOUNTS)[mount]

    def host_path(self, sandbox_path: str) -> Path | None:
        """The host path of a sandbox path under a disk or one of the MOUNTS, else None."""
        for mount, bind in self._disks():
            if sandbox_path == mount or sandbox_path.startswith(mount + "/"):
                return bind.path / sandbox_path[len(mount) :].lstrip("/")
        for mount, name in MOUNTS:
            if sandbox_path == mount or sandbox_path.startswith(mount + "/"):
                return self.root / name / sandbox_path[len(mount) :].lstrip("/")
        return None

    def _disks(self) -> list[tuple[str, DiskBind]]:
        """The disks' mounts, the deepest first (a disk may be mounted inside /workspace)."""
        return sorted(self.binds.items(), key=lambda bind: -len(bind[0]))

    def view(self, sandbox_path: str) -> str:
        """Host path of what a command sees at ``sandbox_path`` (the layers, else the host's)."""
        mapped = self.host_path(sandbox_path)
        if mapped is not None:
            return str(mapped)
        return locate(self.layer, self.lowers, sandbox_path)

    def place(self, sandbox_path: str, layered: Layered | None = None) -> tuple[int, str]:
        """(Descriptor of a host directory, path below it) of a files API path: the caller
        closes the descriptor; raises PathRefused.

        The three MOUNTS are storage directories; the rest of the tree is the
        sandbox's layer, reached through ``layered`` (None: there is none).
        """
        if "\0" in sandbox_path:
            raise PathRefused(400, "path contains NUL")
        if not sandbox_path.startswith("/"):
            raise PathRefused(400, "path must be absolute")
        if ".." in sandbox_path.split("/"):
            raise PathRefused(400, "path must not contain '..'")
        path = posixpath.normpath(sandbox_path)
        for mount, bind in self._disks():
            if path == mount or path.startswith(mount + "/"):
                return _opened_disk(bind), path[len(mount) :].strip("/")
        for mount, name in MOUNTS:
            if path == mount or path.startswith(mount + "/"):
                return _opened(str(self.root / name)), path[len(mount) :].strip("/")
        if path.split("/")[1] in NOT_KEPT:
            raise PathRefused(403, "path is in a file system the sandbox does not keep")
        if layered is None:
            raise PathRefused(
                403, "path is outside /workspace, /tmp and /home/user, and this emulator "
                "has no writable layer for the rest (bubblewrap and overlayfs)"
            )  # fmt: skip
        try:
            return layered(path)
        except (OSError, TimeoutError, concurrent.futures.TimeoutError):  # distinct in 3.10
            raise PathRefused(403, "the sandbox's tree cannot be opened") from None

    def make_mount_point(self, mount: str, layered: Layered | None) -> None:
        """Make a disk's mount point a directory reached with no symlink on the way, before
        bubblewrap makes it (following any link a command planted there: onto the host).
        Raises SubPathRefused (an OSError) for a link or a file on the way."""
        outer = [(m, bind) for m, bind in self._disks() if mount.startswith(m + "/")]
        within = [(m, name) for m, name in MOUNTS if mount.startswith(m + "/")]
        if outer:  # the deepest disk around it
            base, relative = outer[0][1].open(), mount[len(outer[0][0]) :]
        elif within:
            base, relative = open_base(str(self.root / within[0][1])), mount[len(within[0][0]) :]
        elif layered is not None and mount not in dict(MOUNTS):
            base, relative = layered(mount)
        else:
            return  # a storage directory, or a fresh root for every command: nothing planted
        try:
            parts = [part for part in relative.split("/") if part]
            os.close(open_directory(base, parts, create=True, links=False))
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EXDEV, errno.ENOTDIR, errno.EEXIST):
                raise SubPathRefused("mount point") from None
            raise
        finally:
            os.close(base)

    def disk_mounts(self, overlay: OverlayAt | None) -> list[dict[str, Any]]:
        """How ``diskmount`` mounts each disk, outer ones first: its directory (bucket and sub
        path), and the directory ``base`` beneath which its mount point is made (the disk
        around it, by index; one of the MOUNTS; the overlay holding it; else, where nothing
        holds it but bubblewrap's fresh root, a staging directory of the emulator's,
        ``STAGE``/index, which bubblewrap binds at the mount point)."""
        ordered = sorted(self.binds.items())
        plan: list[dict[str, Any]] = []
        for index, (mount, bind) in enumerate(ordered):
            outer = [i for i, (m, _) in enumerate(ordered[:index]) if mount.startswith(m + "/")]
            within = [(m, n) for m, n in MOUNTS if mount == m or mount.startswith(m + "/")]
            base: dict[str, Any]
            if outer:  # the deepest disk around it
                deepest = max(outer, key=lambda i: len(ordered[i][0]))
                base, below = {"disk": deepest}, mount[len(ordered[deepest][0]) :]
            elif within:
                base, below = {"path": str(self.root / within[0][1])}, mount[len(within[0][0]) :]
            elif overlay is not None:
                path, below = overlay(mount)
                base = {"path": path}
            else:
                stage = self.root / STAGE / str(index)
                stage.mkdir(parents=True, exist_ok=True)
                base, below = {"path": str(stage), "staged": True}, ""
            plan.append({"bucket": str(bind.bucket), "sub": bind.sub, "base": base,
                         "below": below.strip("/"), "mount": mount})  # fmt: skip
        return plan

    def make_dirs(self, sandbox_path: str) -> None:
        """``mkdir -p`` of a path under a disk or one of the MOUNTS, beneath its directory:
        a link a command made there is followed only while it stays below. Raises
        PathRefused, or OSError for a link leading out."""
        base_fd, relative = self.place(sandbox_path)
        try:
            os.close(open_directory(base_fd, [p for p in relative.split("/") if p], create=True))
        finally:
            os.close(base_fd)

    def write(
        self, sandbox_path: str, chunks: Iterator[bytes], layered: Layered | None = None
    ) -> int:
        """Stream ``chunks`` into the file (via a temporary file, then rename); see ``beneath``."""
        base_fd, relative = self.place(sandbox_path, layered)
        *parents, name = relative.split("/")
        try:
            if not name:
                raise PathRefused(400, "path is a directory")
            parent = open_directory(base_fd, parents, create=True)
        finally:
            os.close(base_fd)
        try:
            return _replace(parent, name, chunks)
        finally:
            os.close(parent)

    def open_read(self, sandbox_path: str, layered: Layered | None = None) -> tuple[int, int]:
        """An open fd and the size of a regular file; raises FileNotFoundError."""
        base_fd, relative = self.place(sandbox_path, layered)
        try:
            # Non-blocking: a FIFO planted at the path must not hold this thread.
            flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY
            fd = open_beneath(base_fd, relative, flags)
        except OSError as exc:
            if isinstance(exc, FileNotFoundError | NotADirectoryError):
                raise
            raise PathRefused(403, _refusal(exc)) from None
        finally:
            os.close(base_fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise PathRefused(400, "path is not a regular file")
        return fd, st.st_size


def _opened(base: str) -> int:
    try:
        return open_base(base)
    except OSError:
        raise PathRefused(403, "the sandbox's tree cannot be opened") from None


def _opened_disk(bind: DiskBind) -> int:
    try:
        return bind.open()
    except SubPathRefused as exc:
        raise PathRefused(403, exc.message) from None
    except OSError:
        raise PathRefused(403, "the disk's directory cannot be opened") from None


def _replace(parent: int, name: str, chunks: Iterator[bytes]) -> int:
    try:
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
    except FileNotFoundError:
        mode = 0
    if stat.S_ISDIR(mode):
        raise PathRefused(400, "path is a directory")
    if stat.S_ISLNK(mode):
        raise PathRefused(403, "path is a symlink: write to its target")
    partial = f".{name}.upload-{secrets.token_hex(6)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(partial, flags, 0o644, dir_fd=parent)
    written = 0
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
                written += len(chunk)
        os.replace(partial, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial, dir_fd=parent)
        raise
    return written


def _refusal(exc: OSError) -> str:
    if exc.errno in (errno.EXDEV, errno.ELOOP):
        return "path leads through a symlink out of the sandbox's tree (or a loop)"
    return "file cannot be opened"
