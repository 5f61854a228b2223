"""Opening a sandbox's file from the host without a window between check and use.

A sandboxed command changes its own tree whenever it likes: it can turn a
directory into a symlink to a host directory between the moment the files
API checks a path and the moment it opens it. So nothing here looks a path
up from the host's root: each lookup starts from a descriptor of the
directory that holds the sandbox's tree (``base``), and the kernel resolves
the rest beneath it: ``openat2`` with ``RESOLVE_BENEATH`` (Linux 5.6+)
follows a symlink only while it stays below ``base`` (an absolute or
escaping one fails with EXDEV); where ``openat2`` is missing, the path is
walked one component at a time with ``O_NOFOLLOW``, and every symlink is
refused (ELOOP). A file is then made, renamed and opened relative to the
descriptor of the very directory that was resolved: whatever the command
renames meanwhile, that directory stays the one beneath ``base``. Where no
link may be followed at all (a disk's sub path: ``links=False``),
``RESOLVE_NO_SYMLINKS`` refuses even one that stays below (ELOOP).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import struct

SYS_OPENAT2 = 437  # the same number on every architecture (added after the tables merged)
RESOLVE_NO_XDEV, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH = 1, 2, 4, 8
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV
DIRECTORY = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


def open_base(base: str) -> int:
    """A descriptor of ``base``: a path of the emulator's own, trusted as it is."""
    return os.open(base, DIRECTORY)


def open_beneath(
    base_fd: int, relative: str, flags: int, mode: int = 0, *, links: bool = True
) -> int:
    """``openat`` of ``relative`` (no leading ``/``) that never leaves ``base_fd``'s tree,
    and follows no symlink at all unless ``links``."""
    relative = relative or "."
    if _openat2_works():
        resolve = RESOLVE if links else RESOLVE | RESOLVE_NO_SYMLINKS
        return _openat2(base_fd, relative, flags | os.O_CLOEXEC, mode, resolve)
    fd = os.dup(base_fd)
    try:
        *parents, last = relative.split("/")
        for part in parents:
            child = os.open(part, DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
        return os.open(last, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
    finally:
        os.close(fd)


def open_directory(base_fd: int, parts: list[str], *, create: bool, links: bool = True) -> int:
    """The directory ``parts`` below ``base_fd``; missing ones made (mode 755) if ``create``;
    no symlink followed on the way unless ``links``."""
    try:
        return open_beneath(base_fd, "/".join(parts), DIRECTORY, links=links)
    except FileNotFoundError:
        if not create:
            raise
    fd = os.dup(base_fd)
    try:
        for part in parts:
            try:
                child = open_beneath(fd, part, DIRECTORY, links=links)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                child = open_beneath(fd, part, DIRECTORY, links=links)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _openat2(dir_fd: int, path: str, flags: int, mode: int, resolve: int = RESOLVE) -> int:
    how = struct.pack("QQQ", flags, mode, resolve)
    fd = _libc().syscall(SYS_OPENAT2, dir_fd, os.fsencode(path), how, len(how))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int(fd)


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


@functools.cache
def _openat2_works() -> bool:
    """Whether this kernel (and any seccomp filter around us) has ``openat2``."""
    try:
        os.close(_openat2(-100, ".", DIRECTORY, 0))  # AT_FDCWD
    except OSError as exc:
        return exc.errno not in (errno.ENOSYS, errno.EPERM, errno.EINVAL)
    except (AttributeError, TypeError):  # no libc syscall() to call
        return False
    return True
