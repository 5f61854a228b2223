"""Which real OS processes belong to one managed process, read from /proc.

Records are not trusted: "is anything still running?" is always answered by
the kernel. Zombies count as gone (they run nothing; their parent may simply
not have reaped them yet).

Two kinds of tree:

- ``SubreaperTree`` (no isolation): the leader is a child subreaper (see
  ``reporter``), so every descendant stays below it, whether its parent
  exited or it left the session with ``setsid``.
- ``NamespaceTree`` (bubblewrap): everything inside the PID namespace that
  bubblewrap created, plus the bubblewrap monitor process outside it.

A pid is only trusted together with its start time, so a recycled pid is
never mistaken for a member of a tree that has already ended.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ProcStat:
    pid: int
    state: str
    parent: int
    start_time: int


def read_stat(pid: int) -> ProcStat | None:
    """Parse /proc/PID/stat; None if the process does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name is in parentheses and may itself contain ") ".
    fields = raw[raw.rindex(")") + 2 :].split()
    return ProcStat(pid=pid, state=fields[0], parent=int(fields[1]), start_time=int(fields[19]))


def _running(stat: ProcStat | None) -> bool:
    return stat is not None and stat.state not in ("Z", "X")


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def is_alive(pid: int, start_time: int) -> bool:
    """True if ``pid`` is still the process that started at ``start_time`` and not a zombie."""
    stat = read_stat(pid)
    return _running(stat) and stat is not None and stat.start_time == start_time


# How long a signal waits for a new namespace's init to fork its command.
FORK_WAIT = 2.0


def send(pids: list[int], signum: int) -> None:
    """Signal each pid, ignoring the ones that are already gone."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


class ProcessTree(Protocol):
    def members(self) -> list[int]:
        """Pids of the tree's live processes."""

    def signal(self, signum: int) -> None:
        """Deliver ``signum`` to the processes of the tree."""


class SubreaperTree:
    """The subreaper leader (``reporter --subreaper``) and every live descendant of it.

    Orphans are adopted by the leader rather than by the host's init, so a
    process whose parent exited, or that left the session (``setsid``), is
    still found here; the leader lives until its last descendant has ended.
    The leader itself is never signalled (nor stopped by a pause: it must
    stay able to act on its emulator's death); it is the anchor that keeps
    the tree findable, and it leaves on its own once the tree is empty. It
    runs nothing of the user's, so it is a member only while it is alone and
    the command has not been reported ended (``command_ended``): just after
    the start, before it has forked the command, which must not look like
    an empty tree.
    """

    def __init__(self, leader: int, start_time: int) -> None:
        self._leader = leader
        self._start_time = start_time
        self._ended = False

    def command_ended(self) -> None:
        self._ended = True

    def _descendants(self) -> list[int]:
        if not is_alive(self._leader, self._start_time):
            return []  # gone (or its pid recycled): it only leaves once the tree is empty
        children: dict[int, list[int]] = {}
        for pid in _all_pids():
            stat = read_stat(pid)
            if _running(stat) and stat is not None:
                children.setdefault(stat.parent, []).append(pid)
        found, pending = [], [self._leader]
        while pending:
            for child in children.get(pending.pop(), []):
                found.append(child)
                pending.append(child)
        return found

    def members(self) -> list[int]:
        descendants = self._descendants()
        if descendants:
            return descendants
        starting = not self._ended and is_alive(self._leader, self._start_time)
        return [self._leader] if starting else []

    def signal(self, signum: int) -> None:
        targets = self._descendants()
        deadline = time.monotonic() + FORK_WAIT
        # Just after the start the leader may not have forked the command yet.
        while not targets and not self._ended and time.monotonic() < deadline:
            if not is_alive(self._leader, self._start_time):
                return
            time.sleep(0.005)
            targets = self._descendants()
        send(targets, signum)


class NamespaceTree:
    """The bubblewrap monitor plus every live process in its PID namespace."""

    def __init__(
        self,
        monitor: int,
        monitor_start: int,
        init: int | None,
        init_start: int,
        namespace: int | None,
    ) -> None:
        self._monitor = monitor
        self._monitor_start = monitor_start
        self._init = init
        self._init_start = init_start
        self._namespace = f"pid:[{namespace}]"

    def _inside(self) -> list[int]:
        # When the namespace's init dies the kernel kills everything in it,
        # so a dead (or recycled) init means an empty namespace.
        if self._init is None or not is_alive(self._init, self._init_start):
            return []
        found = []
        for pid in _all_pids():
            try:
                if os.readlink(f"/proc/{pid}/ns/pid") != self._namespace:
                    continue
            except OSError:
                continue
            if _running(read_stat(pid)):
                found.append(pid)
        return found

    def _once_forked(self) -> list[int]:
        """The namespace's processes once its init has forked the command.

        Just after creation the init is still starting and alone; as an init
        it drops every signal it has no handler for, so a signal sent then
        would be lost. The command appears within milliseconds.
        """
        deadline = time.monotonic() + FORK_WAIT
        targets = self._inside()
        while targets == [self._init] and time.monotonic() < deadline:
            time.sleep(0.005)
            targets = self._inside()
        return targets

    def members(self) -> list[int]:
        monitor = [self._monitor] if is_alive(self._monitor, self._monitor_start) else []
        return monitor + self._inside()

    def signal(self, signum: int) -> None:
        # Never the monitor: killing it makes bubblewrap SIGKILL the namespace
        # (--die-with-parent), which would skip the command's own SIGTERM handling.
        targets = self._inside()
        if signum != signal.SIGKILL and targets == [self._init]:
            targets = self._once_forked()
        if signum == signal.SIGKILL and not targets:
            targets = self.members()
        send(targets, signum)
