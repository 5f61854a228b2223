"""Mount a sandbox's disks by descriptor in a mount namespace of their own, then run bubblewrap.

Run as a script (``python -I -S diskmount.py SPEC -- bwrap ...``), between
``nsenter`` into the sandbox's layer (if it has one) and bubblewrap.

Why: bubblewrap makes a bind's mount point itself, with ``mkdir`` on the
path ``/newroot/<mount point>``, following every symlink on the way, while
the host's root is still reachable at ``/oldroot``. The emulator makes each
mount point beneath the sandbox's tree first (``Storage.make_mount_point``),
but another command of the same sandbox, running at that very moment, could
swap a parent of the mount point for a link to ``/oldroot/<host dir>``
after that check and before bubblewrap's ``mkdir``: one empty directory on
the host. (``--bind-fd`` gives bubblewrap the disk's directory by
descriptor, not its mount point: that one is a path, always.)

So bubblewrap is given no disk mount point to make in a tree the sandbox
can write. This script, alone in a new mount namespace (private: nothing
propagates back), does each disk's mount itself, by descriptor only: the
disk's directory is opened beneath its bucket and the mount point made and
opened beneath the directory that holds it (the sandbox's storage, its
overlay, or the disk around it), no symlink followed at all (``beneath``,
``RESOLVE_NO_SYMLINKS``); the disk is cloned from its descriptor
(``open_tree``) and attached on the mount point's descriptor
(``move_mount``). No path is looked up between the check and the mount:
whatever a command swaps meanwhile, the directories opened are the ones the
check walked, and a link on the way refuses the command (exit 126). Then
bubblewrap, started in this namespace, binds the storage and the overlays
recursively (``--bind``): the disks come along, already mounted.

A disk whose mount point is in no tree the sandbox can write (without a
layer, ``/mnt/x`` is in bubblewrap's own fresh root) is mounted on an
emulator's staging directory instead, which bubblewrap binds at the mount
point: it makes the parents in its fresh root, where no command reaches.

Where this cannot work (no mount namespace can be made, not even in a user
namespace, or a kernel before 5.2: ``--probe``), bubblewrap binds the disks
as before, and the emulator says once that the window remains.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from typing import Any

SYS_OPEN_TREE, SYS_MOVE_MOUNT = 428, 429  # the same numbers on every architecture
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_REC, MS_PRIVATE = 0x4000, 0x40000
OPEN_TREE_CLONE, AT_EMPTY_PATH, AT_RECURSIVE = 1, 0x1000, 0x8000
MOVE_MOUNT_F_EMPTY_PATH, MOVE_MOUNT_T_EMPTY_PATH = 0x4, 0x40
REFUSED_EXIT = 126  # as a command the emulator refuses before starting it
REFUSED = (
    "a disk's sub_path leads through a symlink or a non-directory, which is never "
    "followed: refused (remove the link through a mount of the whole disk)"
)
MOUNT_POINT_REFUSED = (
    "a disk's mount point leads through a symlink or a non-directory, which is never "
    "followed: refused (detach the disk, remove the link, attach it again)"
)


class Refused(Exception):
    """A disk's sub path or mount point leads through a link: the command is refused."""


def main(argv: list[str]) -> int:
    """``diskmount.py N (BUCKET SUB BASE BELOW){N} -- COMMAND...``: BASE is a trusted path,
    or ``@i``, the i-th disk's mount; BELOW is the mount point's path beneath it."""
    if argv[1:] == ["--probe"]:
        return probe()
    count = int(argv[1])
    fields, command = argv[2 : 2 + 4 * count], argv[3 + 4 * count :]
    assert argv[2 + 4 * count] == "--" and command, "usage: see main's docstring"
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        own_mount_namespace(libc)
        mount_disks(libc, [fields[i : i + 4] for i in range(0, len(fields), 4)])
    except Refused as refused:
        print(f"createos-emulator: {refused}", file=sys.stderr)
        return REFUSED_EXIT
    except OSError as exc:  # never started half-mounted: the command does not run
        print(f"createos-emulator: the disks cannot be mounted: {exc.strerror}", file=sys.stderr)
        return REFUSED_EXIT
    os.execvp(command[0], command)


def probe() -> int:
    """0 where this can work: a mount namespace of its own, and the mount API (Linux 5.2+)."""
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        own_mount_namespace(libc)
    except OSError:
        return 1
    flags = OPEN_TREE_CLONE | AT_RECURSIVE | os.O_CLOEXEC  # whole: a user namespace locks "/"
    tree = libc.syscall(SYS_OPEN_TREE, -100, b"/", flags)  # AT_FDCWD
    return 1 if tree < 0 else 0


def own_mount_namespace(libc: ctypes.CDLL) -> None:
    """A private mount namespace: as root (or in the user namespace of the sandbox's layer)
    directly; else in a user namespace of its own where this user stays who it is (an
    unprivileged bubblewrap then makes its own inside)."""
    if libc.unshare(CLONE_NEWNS) != 0:
        uid, gid = os.getuid(), os.getgid()
        _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS))
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                           ("gid_map", f"{gid} {gid} 1")):  # fmt: skip
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None))


def mount_disks(libc: ctypes.CDLL, disks: list[list[str]]) -> None:
    """Each disk, outer ones first, cloned and attached by descriptor; see the docstring."""
    beneath = _beneath()
    trees: list[int] = []  # each disk's attached mount: the base of the disks inside it
    for bucket, sub, base, below in disks:
        source = _opened(beneath, bucket, sub, REFUSED)
        try:
            tree = _check(libc.syscall(SYS_OPEN_TREE, source, b"", _tree_flags()))
        finally:
            os.close(source)
        trees.append(tree)
        where = os.dup(trees[int(base[1:])]) if base.startswith("@") else base
        target = _opened(beneath, where, below, MOUNT_POINT_REFUSED)
        try:
            flags = MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH
            _check(libc.syscall(SYS_MOVE_MOUNT, tree, b"", target, b"", flags))
        finally:
            os.close(target)


def _opened(beneath: Any, base: str | int, below: str, refusal: str) -> int:
    """The directory ``below`` beneath ``base`` (a trusted path, or a descriptor this takes),
    made if missing, reached with no symlink followed."""
    fd = base if isinstance(base, int) else beneath.open_base(base)
    try:
        parts = [part for part in below.split("/") if part]
        return int(beneath.open_directory(fd, parts, create=True, links=False))
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EXDEV, errno.ENOTDIR, errno.EEXIST):
            raise Refused(refusal) from None
        raise
    finally:
        os.close(fd)


def _tree_flags() -> int:
    return OPEN_TREE_CLONE | AT_RECURSIVE | AT_EMPTY_PATH | os.O_CLOEXEC


def _check(result: int) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _beneath() -> Any:
    """``beneath`` beside this file: run with ``-I -S``, this script imports no package (and
    little else: each import costs every command with a disk its start-up time)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    return __import__("beneath")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
