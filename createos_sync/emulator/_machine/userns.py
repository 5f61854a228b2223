"""A user namespace with users in it, for sandboxes whose root may add and become users.

bubblewrap's own ``--unshare-user`` maps one id: root alone, so ``useradd``,
``runuser`` and ``su`` fail ("cannot set groups"). An emulator run as root
makes this namespace once instead (``unshare --user`` holds it while the
maps are written; bubblewrap joins it with ``--userns``): the system's ids
(below ``SYSTEM_IDS``: root, ``shadow``...) are this machine's own, as root
was with bubblewrap's map, so that root keeps writing and re-owning the
system's files into its layer (``useradd`` rewrites ``/etc/shadow`` and keeps
its group), while the accounts' ids (1000..65535) map to a subordinate range
from ``SUBORDINATE`` that owns nothing on this machine. Commands keep only
``USER_CAPABILITIES``, which act inside that namespace alone: they let root
change owners and modes, bypass file modes and switch users, never open a
host file by handle, mount, or touch a network, a sysctl or a device
(``tests/emulator/test_isolation.py`` attacks it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time

SUBORDINATE = 0x7000_0000  # far above any account's uid (and systemd's dynamic ranges)
SYSTEM_IDS = 1000  # 0..999: the system's own accounts and groups, which own its files
COUNT = 65536
MAPS = (  # in one write: a map is set once
    f"0 0 {SYSTEM_IDS}\n{SYSTEM_IDS} {SUBORDINATE + SYSTEM_IDS} {COUNT - SYSTEM_IDS}\n".encode()
)
USER_CAPABILITIES = (
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
    "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",
)  # fmt: skip
WAIT = 5.0


def capability_args() -> list[str]:
    """bubblewrap's arguments that keep ``USER_CAPABILITIES`` and drop every other."""
    args = ["--cap-drop", "ALL"]
    for name in USER_CAPABILITIES:
        args += ["--cap-add", name]
    return args


def make() -> int | None:
    """A descriptor of a new user namespace with users mapped (see above), or None where
    it cannot be made (not root, no ``unshare``, user namespaces refused)."""
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        return None
    try:
        holder = subprocess.Popen(
            [unshare, "--user", "--", "cat"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except OSError:
        return None
    try:
        return _mapped(holder.pid)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()  # cat ends; the namespace lives on while the descriptor does
        with contextlib.suppress(subprocess.TimeoutExpired):
            holder.wait(WAIT)
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def _mapped(pid: int) -> int | None:
    ours = os.readlink("/proc/self/ns/user")
    deadline = time.monotonic() + WAIT
    while True:  # until the holder has left our namespace (or ended)
        try:
            if os.readlink(f"/proc/{pid}/ns/user") != ours:
                break
        except OSError:
            return None
        if time.monotonic() > deadline:
            return None
        time.sleep(0.002)
    try:
        fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        _write(f"/proc/{pid}/uid_map", MAPS)
        _write(f"/proc/{pid}/setgroups", b"allow")
        _write(f"/proc/{pid}/gid_map", MAPS)
    except OSError:
        os.close(fd)
        return None
    return fd


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
