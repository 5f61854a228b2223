"""Which mount paths and sub paths a disk mount may use: the SDK's rules, then the machine's.

The wire rules are the SDK's (``_resources/checks``), so that the raw API
and the SDK refuse the same input with the same words: an absolute,
normalised, printable path of at most 4096 characters, not ``/`` nor under
``/proc``, ``/sys`` or ``/dev``. Then what this emulator can mount, refused
at attach rather than reported mounted while every later command fails in
bubblewrap: a name over 255 bytes (the file system's limit), a path over
MAX_MOUNTED bytes (bubblewrap makes it under its own root, and the kernel's
4096 counts that prefix), a path that would cover a path the emulator binds
itself (the reporter under ``/run/createos-emulator``, the sandbox's own
storage, its copies of ``/etc`` files), a system directory itself, and, in
the image the sandbox shows, a symlink (``/bin`` on a merged ``/usr``) or a
file (``/etc/hosts``) on the way.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Iterable

from .._wire import ApiError

MAX_PATH = 4096  # characters, as the SDK counts them
NAME_MAX = 255  # bytes of one name
MAX_MOUNTED = 4000  # bytes: bubblewrap failed from 4076 here; some room for its prefixes
RESERVED = ("/proc", "/sys", "/dev")
ELSEWHERE = "mount the disk elsewhere, such as under /mnt"


def check_mount_path(
    path: str, own: Iterable[str], system_dirs: Iterable[str], *, namespaced: bool
) -> str:
    """``path`` if a disk can be mounted there; else the 400 that says why.

    ``own``: the paths the emulator binds in every sandbox; ``system_dirs``: the host's
    directories a bubblewrap sandbox shows (``namespaced``), checked on the host.
    """
    if not path.startswith("/"):
        raise ApiError(400, "mount_path must be an absolute path such as '/mnt/data'")
    if len(path) > MAX_PATH or not path.isprintable():
        raise ApiError(400, "mount_path must be printable and at most 4096 characters")
    if posixpath.normpath(path) != path or path.startswith("//"):
        raise ApiError(400, "mount_path must be normalised: no '.', '..', '//' or trailing '/'")
    if path == "/" or any(path == r or path.startswith(r + "/") for r in RESERVED):
        raise ApiError(400, "mount_path cannot be '/', nor under /proc, /sys or /dev")
    _check_names(path, "mount_path")
    if len(path.encode()) > MAX_MOUNTED:
        raise ApiError(400, f"this emulator mounts paths of at most {MAX_MOUNTED} bytes")
    for mine in own:
        if mine.startswith(path + "/"):
            raise ApiError(400, f"mount_path would cover {mine}, which the emulator binds "
                           f"in every sandbox: {ELSEWHERE}")  # fmt: skip
        if not _is_storage(mine) and (path == mine or path.startswith(mine + "/")):
            raise ApiError(400, f"mount_path is in {mine}, which the emulator binds in "
                           f"every sandbox: {ELSEWHERE}")  # fmt: skip
    if namespaced:
        _check_image(path, tuple(system_dirs))
    return path


def check_sub_path(sub: str) -> str:
    """A relative, normalised folder of the bucket ("" for its root), as the SDK's rule, with
    names the file system can hold."""
    if not sub:
        return sub
    if (
        sub.startswith("/")
        or len(sub) > MAX_PATH
        or not sub.isprintable()
        or posixpath.normpath(sub) != sub
        or ".." in sub.split("/")
    ):
        raise ApiError(400, "sub_path must be a relative, normalised path such as 'ci/cache'")
    _check_names(sub, "sub_path")
    return sub


def _check_names(path: str, what: str) -> None:
    if any(len(name.encode()) > NAME_MAX for name in path.split("/")):
        raise ApiError(400, f"each name in {what} must be at most {NAME_MAX} bytes")


def _is_storage(path: str) -> bool:
    """/workspace, /tmp and /home/user: a disk may replace them, or be mounted inside."""
    return path in ("/workspace", "/tmp", "/home/user")


def _check_image(path: str, system_dirs: tuple[str, ...]) -> None:
    """What the sandbox's image has on the way to ``path``: no system directory itself, no
    symlink (bubblewrap refuses to mount through one), no file (nothing to mount on)."""
    if path in system_dirs:
        raise ApiError(400, f"mount_path cannot be the system directory {path}: {ELSEWHERE}")
    if not any(path.startswith(d + "/") for d in system_dirs):
        return  # made by bubblewrap in the sandbox's own root
    prefix = ""
    for name in path.split("/")[1:]:
        prefix += "/" + name
        try:
            mode = os.lstat(prefix).st_mode
        except OSError:
            return  # missing: bubblewrap makes it (in the sandbox's layer, or its tmpfs)
        if stat.S_ISLNK(mode):
            raise ApiError(400, f"mount_path passes through {prefix[:200]}, a symlink in the "
                           "sandbox's image: mount at the path it points to")  # fmt: skip
        if not stat.S_ISDIR(mode):
            raise ApiError(400, f"mount_path passes through {prefix[:200]}, a file in the "
                           "sandbox's image")  # fmt: skip
