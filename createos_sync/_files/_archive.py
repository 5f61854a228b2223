"""Tar archives of directory trees: packed without following symlinks, checked before extracting.

Packing stores directories, regular files, symlinks (as links, target
unchanged) and hard links between files of the tree; sockets, FIFOs and
devices are skipped. No symlink is ever followed, and file contents are
copied chunk by chunk, so memory stays flat whatever the tree's size.

Extracting trusts nothing in the archive. Every entry is checked before the
first one is written, and the whole archive is refused (``UnsafeArchiveError``)
if any entry

- has an absolute name, a ``..`` component or a NUL;
- is a device, a FIFO or any type other than file, directory, symlink or
  hard link;
- appears twice, or sits beneath a symlink of the archive;
- is a symlink whose target is absolute or resolves, through the archive's
  own symlinks, outside the destination;
- is a hard link to anything but an earlier regular file of the archive.

Entries are written by this module (never by ``TarFile.extract``, whose
safety filters differ between Python patch releases): no owner is applied,
set-id, sticky and group/other write bits are dropped, and the owner keeps
read and write access to everything extracted. Once written, each
symlink is resolved on the real file system as well, which catches what a
case-insensitive file system might alias.
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
import stat
import tarfile
from collections.abc import Iterator
from typing import BinaryIO

import attrs

from ..config import new_beside
from ..errors import UnsafeArchiveError

log = logging.getLogger("createos_sync.files")

COPY_CHUNK = 1 << 20
MAX_LINK_EXPANSIONS = 40  # like the kernel's limit on nested symlinks
FILE_MODE_MASK = 0o755  # no set-id, sticky or group/other write bits
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


# --- packing -------------------------------------------------------------


def pack(root: str | os.PathLike[str], out: BinaryIO) -> None:
    """Write a tar of the tree under ``root`` to ``out``; names are relative to ``root``."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path, name in _walk(os.fspath(root)):
            _add(tar, path, name)


def _walk(root: str) -> Iterator[tuple[str, str]]:
    """(path, archive name) of everything under ``root``: parents first, in name order,
    never descending through a symlink."""
    stack = [("", _entries(root))]
    while stack:
        prefix, entries = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        name = prefix + entry.name
        yield entry.path, name
        if entry.is_dir(follow_symlinks=False):
            stack.append((name + "/", _entries(entry.path)))


def _entries(directory: str) -> Iterator[os.DirEntry[str]]:
    with os.scandir(directory) as scan:
        return iter(sorted(scan, key=lambda e: e.name))


def _add(tar: tarfile.TarFile, path: str, name: str) -> None:
    info = tar.gettarinfo(path, arcname=name)  # lstat: a symlink stays a symlink
    if info is None or not (info.isreg() or info.isdir() or info.issym() or info.islnk()):
        log.info("not archived (not a file, directory or symlink): %s", name)
        return
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if not info.isreg():
        tar.addfile(info)
        return
    # O_NOFOLLOW: a file swapped for a symlink since the lstat is refused, not followed.
    fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    with os.fdopen(fd, "rb") as source:
        tar.addfile(info, source)


# --- extracting ----------------------------------------------------------


@attrs.frozen
class Member:
    """A checked entry: its normalised name and, for a hard link, the name it links to."""

    info: tarfile.TarInfo
    name: str
    link: str | None = None


def check_target(target: str | os.PathLike[str]) -> str:
    """Where a tree can be extracted: a new or empty directory whose parent exists."""
    path = os.path.abspath(target)
    if os.path.lexists(path):
        if os.path.islink(path) or not os.path.isdir(path):
            raise FileExistsError(f"{path} exists and is not a directory")
        if os.listdir(path):
            raise FileExistsError(f"{path} exists and is not empty")
    require_parent(path)
    return path


def require_parent(path: str) -> None:
    """Refuse a local destination whose directory does not exist, before any request."""
    if not os.path.isdir(os.path.dirname(path)):
        raise FileNotFoundError(f"the parent directory of {path} does not exist")


def unpack(archive: BinaryIO, target: str | os.PathLike[str]) -> None:
    """Check every entry of the tar in ``archive``, then extract it as the directory ``target``.

    The tree is built in a temporary directory beside ``target`` and renamed
    into place (replacing an empty directory), so a refused or failed
    extraction leaves nothing behind.

    Raises:
        UnsafeArchiveError: an entry is unsafe, or the archive is damaged.
        FileExistsError: ``target`` exists and is not an empty directory.
    """
    path = check_target(target)
    staging = _staging_directory(path)
    try:
        try:
            with tarfile.open(fileobj=archive, mode="r:") as tar:
                members = check(tar.getmembers())
                _write(tar, members, staging)
        except tarfile.TarError as exc:
            raise UnsafeArchiveError(f"the archive is damaged ({exc})") from None
        _check_written_links(members, staging)
        os.replace(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _staging_directory(path: str) -> str:
    staging, _ = new_beside(path, ".part", os.mkdir)  # the umask applies, as for any directory
    return staging


def check(infos: list[tarfile.TarInfo]) -> list[Member]:
    """The archive's entries, each checked; raise UnsafeArchiveError at the first unsafe one."""
    members: list[Member] = []
    seen: dict[str, tarfile.TarInfo] = {}
    symlinks: dict[str, str] = {}
    for info in infos:
        name = _relative(info.name, "entry")
        if name is None:  # the root itself ("." or "./")
            if not info.isdir():
                raise UnsafeArchiveError(f"archive entry {info.name!r} is not a directory")
            continue
        if name in seen:
            raise UnsafeArchiveError(f"archive entry {name!r} appears twice")
        link = None
        if info.issym():
            symlinks[name] = _symlink_target(name, info.linkname)
        elif info.islnk():
            link = _relative(info.linkname, "hard link target")
            if link is None or not (link in seen and seen[link].isreg()):
                raise UnsafeArchiveError(
                    f"archive entry {name!r} is a hard link to {info.linkname!r}, "
                    "which is not an earlier file of the archive"
                )
        elif not (info.isreg() or info.isdir()):
            raise UnsafeArchiveError(f"archive entry {name!r} is a {_kind(info)}")
        seen[name] = info
        members.append(Member(info, name, link))
    for member in members:
        parts = member.name.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if parent in symlinks:
                raise UnsafeArchiveError(
                    f"archive entry {member.name!r} lies beneath the symlink {parent!r}"
                )
            if parent in seen and not seen[parent].isdir():
                raise UnsafeArchiveError(
                    f"archive entry {member.name!r} lies beneath {parent!r}, not a directory"
                )
        if member.name in symlinks and _escapes(member.name, symlinks):
            raise UnsafeArchiveError(
                f"archive entry {member.name!r} is a symlink to "
                f"{symlinks[member.name]!r}, outside the extracted tree"
            )
    return members


def _relative(name: str, what: str) -> str | None:
    """``name`` as a clean relative path ("a/b"), None for the root; unsafe names raise."""
    if "\0" in name:
        raise UnsafeArchiveError(f"archive {what} {name!r} contains NUL")
    if name.startswith("/") or (os.sep != "/" and (os.sep in name or ":" in name)):
        raise UnsafeArchiveError(f"archive {what} {name!r} is an absolute path")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchiveError(f"archive {what} {name!r} contains '..'")
    return "/".join(parts) or None


def _symlink_target(name: str, target: str) -> str:
    if not target or "\0" in target:
        raise UnsafeArchiveError(f"archive entry {name!r} is a symlink with an invalid target")
    if target.startswith("/"):
        raise UnsafeArchiveError(
            f"archive entry {name!r} is a symlink to the absolute path {target!r}"
        )
    return target


def _escapes(name: str, symlinks: dict[str, str]) -> bool:
    """Whether the symlink ``name`` resolves outside the tree, following the archive's links.

    Resolved as the kernel would: component by component, a ``..`` after a
    symlink climbing from where that symlink points, not from the symlink.
    """
    resolved = name.split("/")[:-1]
    pending = collections.deque(symlinks[name].split("/"))
    expansions = 0
    while pending:
        part = pending.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            if not resolved:
                return True
            resolved.pop()
            continue
        resolved.append(part)
        target = symlinks.get("/".join(resolved))
        if target is not None:
            expansions += 1
            if expansions > MAX_LINK_EXPANSIONS:
                raise UnsafeArchiveError(f"archive entry {name!r} is part of a symlink loop")
            resolved.pop()
            pending.extendleft(reversed(target.split("/")))
    return False


def _kind(info: tarfile.TarInfo) -> str:
    if info.ischr() or info.isblk():
        return "device"
    if info.isfifo():
        return "FIFO"
    return f"entry of unsupported type {info.type!r}"


def _write(tar: tarfile.TarFile, members: list[Member], root: str) -> None:
    """Create the checked members under ``root`` (an empty directory we own)."""
    root = os.path.realpath(root)
    known_dirs = {root}
    directories: list[tuple[str, tarfile.TarInfo]] = []
    for member in members:
        info = member.info
        path = os.path.join(root, *member.name.split("/"))
        _make_parent(os.path.dirname(path), known_dirs)
        if info.isdir():
            _make_directory(path)
            known_dirs.add(path)
            directories.append((path, info))
        elif info.issym():
            os.symlink(info.linkname, path)
        elif member.link is not None:
            os.link(os.path.join(root, *member.link.split("/")), path, follow_symlinks=False)
        else:
            _write_file(tar, info, path)
    # Modes last, deepest first: a read-only directory must not stop its own extraction.
    for path, info in reversed(directories):
        os.chmod(path, (info.mode & FILE_MODE_MASK) | stat.S_IRWXU)
        os.utime(path, (info.mtime, info.mtime))


def _make_parent(parent: str, known_dirs: set[str]) -> None:
    """Create a missing parent, and make sure no symlink leads there (case-insensitive file
    systems can alias a checked name)."""
    if parent in known_dirs:
        return
    os.makedirs(parent, exist_ok=True)
    if os.path.realpath(parent) != parent:
        raise UnsafeArchiveError(
            f"archive path {parent!r} leads through a symlink on this file system"
        )
    known_dirs.add(parent)


def _make_directory(path: str) -> None:
    try:
        os.mkdir(path)
    except FileExistsError:
        if os.path.islink(path) or not os.path.isdir(path):
            raise


def _write_file(tar: tarfile.TarFile, info: tarfile.TarInfo, path: str) -> None:
    source = tar.extractfile(info)
    if source is None:
        raise UnsafeArchiveError(f"archive entry {info.name!r} has no readable contents")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as sink, source:
        shutil.copyfileobj(source, sink, COPY_CHUNK)
        os.chmod(sink.fileno(), (info.mode & FILE_MODE_MASK) | stat.S_IRUSR | stat.S_IWUSR)
    os.utime(path, (info.mtime, info.mtime))


def _check_written_links(members: list[Member], root: str) -> None:
    """Resolve every extracted symlink on the real file system: it must stay inside ``root``."""
    root = os.path.realpath(root)
    for member in members:
        if member.info.issym():
            resolved = os.path.realpath(os.path.join(root, *member.name.split("/")))
            if resolved != root and not resolved.startswith(root + os.sep):
                raise UnsafeArchiveError(
                    f"archive entry {member.name!r} is a symlink that leads outside "
                    "the extracted tree on this file system"
                )
