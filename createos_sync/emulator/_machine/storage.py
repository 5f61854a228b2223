"""A sandbox's storage directory and the mapping of sandbox paths onto it.

Only three sandbox trees exist as storage: ``/workspace``, ``/tmp`` and
``/home/user``. The files API maps them the same way in both isolation modes;
anything else is refused. Under bubblewrap with overlays (``_layers``), the
rest of the tree a sandbox wrote lives in ``layer/``, over ``lowers`` (the
layers of the template it was made from). The host path is resolved and checked to stay
inside the storage, and the last component is opened with O_NOFOLLOW, so a
symlink planted by a sandboxed command cannot make the API read or write a
host file. (Absolute symlink targets are host paths once resolved here, so a
link to ``/workspace/x`` made inside bubblewrap is refused by the files API.)
"""

from __future__ import annotations

import os
import posixpath
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from .layers import UPPER, copy_tree, locate, remove_tree

MOUNTS = (("/workspace", "workspace"), ("/tmp", "tmp"), ("/home/user", "home"))
CHUNK = 1 << 20


class PathRefused(Exception):
    """A sandbox path that the files API does not serve; ``status`` is 400 or 403."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Storage:
    """Directories ``workspace/``, ``tmp/`` and ``home/`` under ``root``."""

    def __init__(self, root: Path, lowers: tuple[Path, ...] = ()) -> None:
        self.root = root
        self.lowers = lowers  # template layers under this sandbox's own, topmost first
        # Persistent disks: mount path -> the host directory standing in for the bucket.
        self.binds: dict[str, Path] = {}

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
        for mount, host in sorted(self.binds.items(), key=lambda b: -len(b[0])):
            if sandbox_path == mount or sandbox_path.startswith(mount + "/"):
                return host / sandbox_path[len(mount) :].lstrip("/")
        for mount, name in MOUNTS:
            if sandbox_path == mount or sandbox_path.startswith(mount + "/"):
                return self.root / name / sandbox_path[len(mount) :].lstrip("/")
        return None

    def view(self, sandbox_path: str) -> str:
        """Host path of what a command sees at ``sandbox_path`` (the layers, else the host's)."""
        mapped = self.host_path(sandbox_path)
        if mapped is not None:
            return str(mapped)
        return locate(self.layer, self.lowers, sandbox_path)

    def checked_path(self, sandbox_path: str) -> Path:
        """The resolved host path for the files API; raises PathRefused."""
        if "\0" in sandbox_path:
            raise PathRefused(400, "path contains NUL")
        if not sandbox_path.startswith("/"):
            raise PathRefused(400, "path must be absolute")
        if ".." in sandbox_path.split("/"):
            raise PathRefused(400, "path must not contain '..'")
        host = self.host_path(posixpath.normpath(sandbox_path))
        if host is None:
            raise PathRefused(403, "path is outside /workspace, /tmp, /home/user and the disks")
        resolved = Path(os.path.realpath(host))
        roots = [Path(os.path.realpath(p)) for p in (self.root, *self.binds.values())]
        if not any(resolved == root or root in resolved.parents for root in roots):
            raise PathRefused(403, "path escapes the sandbox storage")
        return resolved

    def write(self, sandbox_path: str, chunks: Iterator[bytes]) -> int:
        """Stream ``chunks`` into the file (via a temporary file, then rename)."""
        target = self.checked_path(sandbox_path)
        if target.is_dir():
            raise PathRefused(400, "path is a directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.upload-{secrets.token_hex(6)}")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        written = 0
        try:
            with os.fdopen(fd, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
                    written += len(chunk)
            os.replace(partial, target)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        return written

    def open_read(self, sandbox_path: str) -> tuple[int, int]:
        """An open fd and the size of a regular file; raises FileNotFoundError."""
        target = self.checked_path(sandbox_path)
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise PathRefused(403, "file cannot be opened") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise PathRefused(400, "path is not a regular file")
        return fd, st.st_size
