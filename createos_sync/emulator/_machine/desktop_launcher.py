"""How the desktop agent starts an application: ``python3 -I -S -c <this source> ARGV...``.

Under bubblewrap, sandboxed root has uid 0 but no capability. xterm, run
by uid 0, calls initgroups() before it starts its shell and gives up when
that fails, as setgroups always does without CAP_SETGID: its window never
shows. Where that is so (root without CAP_SETGID), this adds a seccomp
filter making ``setgroups`` succeed without effect, then runs ARGV. A
seccomp filter can only take away: the application gains no privilege and
keeps the groups it has; the filter stays with it and its children only,
not with the rest of the sandbox. Plain mode (the emulator run as root)
keeps its capabilities and gets no filter.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import sys

# setgroups' number per architecture, with seccomp's AUDIT_ARCH_* for it.
SETGROUPS = {"x86_64": (0xC000003E, 116), "aarch64": (0xC00000B7, 159)}
CAP_SETGID = 6
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
LD, JEQ, RET = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K
ALLOW, SUCCEED = 0x7FFF0000, 0x00050000  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO with errno 0


class Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def needed() -> bool:
    """Whether this process is root without CAP_SETGID (where setgroups can only fail)."""
    if os.geteuid() != 0:
        return False
    with open("/proc/self/status", encoding="ascii") as f:
        effective = next((line.split()[1] for line in f if line.startswith("CapEff:")), "0")
    return not int(effective, 16) >> CAP_SETGID & 1


def keep_groups() -> None:
    """Make ``setgroups`` a no-op that succeeds, for this process and what it runs."""
    arch = SETGROUPS.get(platform.machine())
    if arch is None:
        return  # an architecture this filter does not know: the launch may fail, and says so
    audit_arch, number = arch
    program = [
        (LD, 0, 0, 4),  # seccomp_data.arch
        (JEQ, 0, 3, audit_arch),
        (LD, 0, 0, 0),  # seccomp_data.nr
        (JEQ, 0, 1, number),
        (RET, 0, 0, SUCCEED),
        (RET, 0, 0, ALLOW),
    ]
    code = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *i) for i in program))
    libc = ctypes.CDLL(None, use_errno=True)
    fprog = Program(len(program), ctypes.addressof(code))
    # no_new_privs (bubblewrap has set it already) lets an unprivileged process add a filter.
    if (
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
        or libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0
    ):
        errno = ctypes.get_errno()
        print(f"setgroups stays refused: {os.strerror(errno)}", file=sys.stderr)


def main() -> None:
    if needed():
        keep_groups()
    os.execvp(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()
