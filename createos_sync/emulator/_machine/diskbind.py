"""A persistent disk as one sandbox mounts it: the bucket's directory and a sub path in it.

The bucket's directory is the emulator's own; what lies below it is the
sandboxes'. Any sandbox that mounts the disk whole can rename ``job-1`` and
put a symlink to a host directory in its place, at any moment. So a sub
path is never resolved once and kept as a host path: at every use (a
command's bind, the files API, an attach) it is opened afresh beneath the
bucket's descriptor with no symlink followed on the way (``beneath``), and
the very directory that was opened is mounted: by ``diskmount`` (cloned from
its descriptor, attached on the mount point's, before bubblewrap starts), or
where that cannot work, by bubblewrap (``--bind-fd``, which checks that what
it mounted is that directory). A link anywhere in the sub path is refused,
never followed, even one that stays in the disk.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .beneath import open_base, open_directory
from .diskmount import MOUNT_POINT_REFUSED, REFUSED

log = logging.getLogger("createos_sync.emulator")


# Mounts a sandbox's disks by descriptor, then runs bubblewrap (see ``diskmount``).
MOUNTER = str(Path(__file__).resolve().with_name("diskmount.py"))
PROBE_TIMEOUT = 10.0
BOUND_BY_BUBBLEWRAP = (
    "disks cannot be mounted by descriptor here (no mount namespace or mount API): "
    "bubblewrap binds them, and a command swapping a mount point's parent for a link just "
    "as another command starts could make one empty directory on this machine"
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


def mounter_argv(plan: list[dict[str, Any]]) -> list[str]:
    """The command prefix that mounts the disks of ``plan`` (``Storage.disk_mounts``) by
    descriptor, then runs the rest (bubblewrap)."""
    fields: list[str] = []
    for disk in plan:
        base = disk["base"]
        where = f"@{base['disk']}" if "disk" in base else base["path"]
        fields += [disk["bucket"], disk["sub"], where, disk["below"]]
    return [sys.executable, "-I", "-S", MOUNTER, str(len(plan)), *fields, "--"]


@functools.cache
def mounter_works() -> bool:
    """Whether ``diskmount`` can work here; if not, says once that bubblewrap binds disks."""
    probe = [sys.executable, "-I", "-S", MOUNTER, "--probe"]
    try:
        works = (
            bool(sys.executable) and subprocess.run(probe, timeout=PROBE_TIMEOUT).returncode == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        works = False
    if not works:
        log.warning(BOUND_BY_BUBBLEWRAP)
    return works


@functools.cache
def has_bind_fd(executable: str) -> bool:
    """Whether this bubblewrap has ``--bind-fd`` (not every distribution's does)."""
    try:
        shown = subprocess.run([executable, "--help"], capture_output=True, timeout=PROBE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"--bind-fd" in shown.stdout + shown.stderr


def open_binds(binds: Mapping[str, DiskBind]) -> list[tuple[int, str]]:
    """(Descriptor, mount path) of every disk, outer mounts first; all closed on a refusal."""
    opened: list[tuple[int, str]] = []
    try:
        for mount, bind in sorted(binds.items()):
            opened.append((bind.open(), mount))
    except BaseException:
        for fd, _ in opened:
            os.close(fd)
        raise
    return opened
