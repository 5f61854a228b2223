"""A persistent disk as one sandbox mounts it: the bucket's directory and a sub path in it.

The bucket's directory is the emulator's own; what lies below it is the
sandboxes'. Any sandbox that mounts the disk whole can rename ``job-1`` and
put a symlink to a host directory in its place, at any moment. So a sub
path is never resolved once and kept as a host path: at every use (a
command's bind, the files API, an attach) it is opened afresh beneath the
bucket's descriptor with no symlink followed on the way (``beneath``), and
bubblewrap binds the very directory that was opened (``--bind-fd``), so no
path is looked up again between the check and the mount. A link anywhere
in the sub path is refused, never followed, even one that stays in the disk.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from .beneath import open_base, open_directory

REFUSED = (
    "a disk's sub_path leads through a symlink or a non-directory, which is never "
    "followed: refused (remove the link through a mount of the whole disk)"
)
MOUNT_POINT_REFUSED = (
    "a disk's mount point leads through a symlink or a non-directory, which is never "
    "followed: refused (detach the disk, remove the link, attach it again)"
)


class SubPathRefused(OSError):
    """A disk's sub path (or its mount point) is, or passes through, a symlink or something
    not a directory."""

    def __init__(self, what: str = "sub_path") -> None:
        self.message = REFUSED if what == "sub_path" else MOUNT_POINT_REFUSED
        super().__init__(errno.ELOOP, self.message)


@dataclass(frozen=True)
class DiskBind:
    bucket: Path  # the emulator's own directory for the bucket (trusted)
    sub: str  # relative, normalised, no ".." (checked at attach); "" for the whole disk

    def open(self) -> int:
        """An ``O_PATH`` descriptor of the sub path's directory, made if missing; the caller
        closes it. Raises SubPathRefused (an OSError) for a link on the way."""
        self.bucket.mkdir(parents=True, exist_ok=True)
        base = open_base(str(self.bucket))
        if not self.sub:
            return base
        try:
            return open_directory(base, self.sub.split("/"), create=True, links=False)
        except (NotADirectoryError, FileExistsError):
            raise SubPathRefused() from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EXDEV, errno.ENOTDIR):
                raise SubPathRefused() from None
            raise
        finally:
            os.close(base)

    def check(self) -> None:
        """Raise SubPathRefused unless the sub path is a directory reached without a link."""
        os.close(self.open())

    @property
    def path(self) -> Path:
        """The host path it stands for: for a check of existence or for plain mode (which
        isolates nothing) only; never followed by a bind or by the files API."""
        return self.bucket / self.sub if self.sub else self.bucket
