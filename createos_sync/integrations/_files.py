"""Files the way frameworks expect them: any path, and Python's own errors.

The files API moves the bytes: one request each way. A path it refuses (a
directory, a parent that does not exist, or a tree it does not serve: the
local emulator serves only ``/workspace``, ``/tmp`` and ``/home/user``) goes
through a command instead, run as the sandbox's user, so that its answer is
the one a program in the sandbox would get. That command's stderr names the
error, which becomes ``IsADirectoryError``, ``PermissionError``,
``FileNotFoundError`` (...) naming the caller's own path.

Request budget: ``write`` 1 (through a command: 1 in the lease's command
session, its data inline; 4 over about 32 KiB, staged as a managed process's
stdin); ``read`` 1 (through a command: 1 to copy the file to a scratch path,
1 to read it, 1 to remove it).
A sandbox user other than root (``user=``) always goes through commands.
"""

from __future__ import annotations

import errno
import os
import tempfile
import uuid

import createos_sync as cs

# The sandbox's own words for what went wrong, from a shell's or coreutils' stderr.
_ERRORS = (
    ("Is a directory", errno.EISDIR),
    ("Permission denied", errno.EACCES),
    ("Operation not permitted", errno.EPERM),
    ("Read-only file system", errno.EROFS),
    ("Not a directory", errno.ENOTDIR),
    ("No such file or directory", errno.ENOENT),
    ("No space left on device", errno.ENOSPC),
)
_WRITE = (
    'f=$1; if [ -d "$f" ]; then echo "$f: Is a directory" >&2; exit 1; fi; '
    'mkdir -p -- "$(dirname -- "$f")" && cat > "$f"'
)
_COPY = (
    'f=$1; if [ -d "$f" ]; then echo "$f: Is a directory" >&2; exit 1; fi; '
    'n=$(stat -L -c %s -- "$f") || exit 1; '
    'if [ "$n" -gt "$3" ]; then echo "size $n" >&2; exit 27; fi; '
    'cat -- "$f" > "$2"'
)
_TOO_LARGE = 27
# runuser by a fixed PATH, never the image's: it runs with root's authority
# before the caller's command (Inspect's rule for wrappers).
_AS_USER = 'PATH=/usr/sbin:/usr/bin:/sbin:/bin; exec runuser -u "$0" -- "$@"'


class FileTooLarge(ValueError):
    """A file larger than the caller's limit: it was not read."""

    def __init__(self, path: str, limit: int) -> None:
        super().__init__(f"{path} is larger than the limit of {limit} bytes")
        self.path = path
        self.limit = limit


def as_user(user: str | None, argv: list[str]) -> list[str]:
    """``argv`` run as ``user`` (through ``runuser``, found on a fixed PATH), or as it is."""
    return argv if user is None else ["/bin/sh", "-c", _AS_USER, user, *argv]


def write(
    box: cs.Lease, path: str, data: bytes, *, shown: str | None = None, user: str | None = None
) -> None:
    """Write ``data`` to the absolute ``path``, making its parents; errors name ``shown``.

    With ``user``, always through a command run as that user: the files API
    writes as root, which a file's permissions never stop.
    """
    if user is None:
        try:
            box.write_file(path, data)
            return
        except cs.CreateosApiError as exc:
            if not _refused(exc):
                raise
    result = box.run(as_user(user, ["/bin/sh", "-c", _WRITE, "sh", path]), stdin=data)
    if not result.ok:
        raise _os_error(result, shown or path)


def read(
    box: cs.Lease, path: str, limit: int, *, shown: str | None = None, user: str | None = None
) -> bytes:
    """The bytes of the file at the absolute ``path``; ``FileTooLarge`` over ``limit`` bytes.

    With ``user``, copied by a command run as that user (so its permissions apply).
    """
    shown = shown or path
    if user is None:
        try:
            return _download(box, path, limit, shown)
        except cs.CreateosApiError as exc:
            if exc.status == 404:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), shown) from None
            if not _refused(exc):
                raise
    scratch = f"/tmp/.createos-read-{uuid.uuid4().hex}"
    try:
        result = box.run(as_user(user, ["/bin/sh", "-c", _COPY, "sh", path, scratch, str(limit)]))
        if result.exit_code == _TOO_LARGE:
            raise FileTooLarge(shown, limit)
        if not result.ok:
            raise _os_error(result, shown)
        return _download(box, scratch, limit, shown)
    finally:
        box.run(["rm", "-f", "--", scratch])


def _download(box: cs.Lease, path: str, limit: int, shown: str) -> bytes:
    """Stream the file to a local temporary file first: a huge one never fills memory."""
    with tempfile.TemporaryDirectory(prefix="createos-read-") as local:
        target = os.path.join(local, "file")
        box.download(path, target)
        if os.path.getsize(target) > limit:
            raise FileTooLarge(shown, limit)
        with open(target, "rb") as f:
            return f.read()


def _refused(exc: cs.CreateosApiError) -> bool:
    """A 4xx about the path itself (not the key, the budget or the sandbox): try a command."""
    return exc.status in (400, 403, 404, 409, 422)


def _os_error(result: cs.RunResult[str], shown: str) -> OSError:
    said = result.stderr
    for words, code in _ERRORS:
        if words in said:
            kind = {
                errno.EISDIR: IsADirectoryError,
                errno.EACCES: PermissionError,
                errno.EPERM: PermissionError,
                errno.EROFS: PermissionError,
                errno.ENOTDIR: NotADirectoryError,
                errno.ENOENT: FileNotFoundError,
            }.get(code, OSError)
            return kind(code, os.strerror(code), shown)
    return OSError(
        errno.EIO, f"the sandbox could not transfer the file (exit {result.exit_code})", shown
    )
