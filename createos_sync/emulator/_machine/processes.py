"""A managed process: a real OS process tree with pumped output and a lifecycle.

The leader runs in a new session with three pipes, or, for a terminal
process, on a pseudo-terminal (``_terminal``). Pump threads move its stdout
and stderr (a terminal's one output stream, ``pty``) into the output journal
(see ``_journal``); a waiter thread waits for the command's end and then
closes the journal with the exit status once the outputs are drained: at
EOF, or, when a background process keeps one open, once it has been found
empty ``LINGER`` seconds after the command ended.

Without isolation the leader is ``reporter --subreaper``, which runs the
command as its child, reports its exact wait status on the status pipe (the
command's end), and adopts every orphan of the tree until the last one ends.
A terminal process is the session leader of its pty in both modes (the
reporter makes it so: see ``_terminal``).

What a command starts in the background (``nohup server &``, ``setsid``)
outlives it, as on the service: the leader's end is the command's
(``leader_exited``, the exit frame), the tree's comes when its last process
ends (``tree_exited``), a termination, or the sandbox's destruction
(``stop``); a pause freezes it. Under bubblewrap the namespace's init (the
reporter) stays while the tree lives; without isolation the subreaper does.
Without the reporter, bubblewrap's own init ends the tree with the command.

Exit status under bubblewrap: the status reporter (``reporter``) gives the
command's exact wait status. When it cannot run, or was killed before it
could report, only bubblewrap's own exit code is known: the command's code,
or 128+N when it was killed by signal N. The emulator then reports
``signal`` for 128+N when it delivered signal N to that tree itself (signal
endpoint, termination, destroy), and ``exit_code`` otherwise.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from .._wire import timestamp
from .isolation import Bubblewrap, Isolation
from .journal import Journal
from .proctree import NamespaceTree, ProcessTree, SubreaperTree, read_stat
from .storage import Storage
from .terminal import STREAM as PTY_STREAM
from .terminal import open_terminal, read_output, set_size

LINGER = 0.2
POLL_MS = 100
KILL_TIMEOUT = 5.0


@dataclass(frozen=True)
class Command:
    cmd: str
    args: list[str]
    cwd: str
    env: dict[str, str]


class StdinClosed(Exception):
    """The process's stdin is closed (by the client, or because it exited)."""


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


class ManagedProcess:
    """One process tree of a sandbox, as the processes API sees it."""

    def __init__(
        self,
        process_id: str,
        kind: str,
        command: Command,
        journal_bytes: int,
        frame_bytes: int,
        *,
        size: tuple[int, int] | None = None,
    ) -> None:
        self.id = process_id
        self.kind = "pty" if size is not None else kind
        self.command = command
        self.size = size  # (rows, cols) to start a terminal process with
        self.journal = Journal(journal_bytes)
        self._frame_bytes = frame_bytes
        self._lock = threading.Lock()
        self._state = "starting"
        self._pid = 0
        self._tree: ProcessTree | None = None
        self._tree_exited = False
        self._created_at = time.time()
        self._finished_at: float | None = None
        self._exit_code: int | None = None
        self._signal: str | None = None
        self._delivered: set[int] = set()
        self._done = threading.Event()
        self._leader_exit: float | None = None
        self._stopping = False
        self._stdin_lock = threading.Lock()
        self._stdin: int | None = None
        self._input_seq = 0
        self._namespaced = False
        self._lingers = False  # the namespace outlives the command (see above)

    # -- start -------------------------------------------------------------

    def start(self, isolation: Isolation, storage: Storage) -> None:
        """Spawn the leader and its pump and waiter threads."""
        ends = _Ends.pipes() if self.size is None else _Ends.terminal(*self.size)
        status_r, status_w = os.pipe()
        # bubblewrap closes its own status fd in the sandbox: its reporter needs a second.
        status_fds = (status_w, os.dup(status_w) if isolation.namespaced else status_w)
        c = self.command
        disks: tuple[int, ...] = ()  # the disks' directories, bound by descriptor
        self._lingers = isinstance(isolation, Bubblewrap) and isolation.reports_wait_status
        try:
            launch = isolation.launch(
                storage,
                [c.cmd, *c.args],
                c.cwd,
                c.env,
                status_fds,
                terminal=self.size is not None,
            )
            disks = launch.fds
            popen = subprocess.Popen(
                launch.argv,
                cwd=launch.cwd,
                env=launch.env,
                stdin=ends.child[0],
                stdout=ends.child[1],
                stderr=ends.child[2],
                start_new_session=True,
                pass_fds=(*status_fds, *disks, *launch.kept_fds),
            )
        except (OSError, FutureTimeout) as exc:  # no command, no layer, a disk refused
            ends.close_ours()
            os.close(status_r)
            self._fail(exc)
            return
        finally:
            ends.close_child()
            for fd in {*status_fds, *disks}:
                os.close(fd)
        self._pid = popen.pid
        self._stdin = ends.stdin
        status = _StatusPipe(status_r)
        self._tree = self._make_tree(popen.pid, status, namespaced=isolation.namespaced)
        with self._lock:
            self._state = "running"
        drained = [threading.Event() for _ in ends.outputs]
        for (fd, stream), event in zip(ends.outputs, drained, strict=True):
            self._thread(self._pump, fd, stream, event)
        self._thread(self._wait_leader, popen, drained, status)

    def _thread(self, target: Callable[..., None], *args: object) -> None:
        threading.Thread(target=target, args=args, name=f"emulator-{self.id}", daemon=True).start()

    def _make_tree(self, pid: int, status_pipe: _StatusPipe, *, namespaced: bool) -> ProcessTree:
        leader = read_stat(pid)
        start = leader.start_time if leader is not None else -1
        if not namespaced:
            return SubreaperTree(pid, start)
        self._namespaced = True
        status = status_pipe.until("child-pid")
        init = status.get("child-pid")
        init_stat = read_stat(init) if isinstance(init, int) else None
        return NamespaceTree(
            pid,
            start,
            init if isinstance(init, int) else None,
            init_stat.start_time if init_stat is not None else -1,
            status.get("pid-namespace"),
        )

    def _fail(self, exc: OSError | FutureTimeout) -> None:
        """The command could not be launched: it ends at once, as a shell says so."""
        why = getattr(exc, "strerror", None) or str(exc) or "could not be started"
        self.journal.append("stderr", f"{self.command.cmd}: {why}\n".encode())
        code = 127 if getattr(exc, "errno", None) == errno.ENOENT else 126
        with self._lock:
            self._state = "failed"
            self._tree_exited = True
            self._finished_at = time.time()
            self._exit_code = code
        self.journal.finish(code, None)
        self._done.set()

    # -- threads -----------------------------------------------------------

    def _pump(self, fd: int, stream: str, drained: threading.Event) -> None:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        try:
            while not self._stopping:
                if not poller.poll(POLL_MS):
                    exited = self._leader_exit
                    if exited is not None and time.monotonic() - exited >= LINGER:
                        drained.set()
                    continue
                data = read_output(fd, self._frame_bytes)
                if not data:
                    break
                self.journal.append(stream, data)
        finally:
            drained.set()
            os.close(fd)

    def _wait_leader(
        self,
        popen: subprocess.Popen[bytes],
        drained: list[threading.Event],
        status_pipe: _StatusPipe,
    ) -> None:
        if not self._namespaced:
            # The subreaper reports the command's end, then stays while orphans live on.
            status = status_pipe.until("wait-status")
            status_pipe.close()
            if isinstance(self._tree, SubreaperTree):
                self._tree.command_ended()
        elif self._lingers:  # the init reports the command's end, and stays while the tree lives
            status = status_pipe.until("wait-status")
            # A command that left nothing running is wholly gone by its exit frame, as before.
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(LINGER)
        else:
            popen.wait()
            status = status_pipe.rest()
        finished = time.time()
        self._leader_exit = time.monotonic()
        wait_status = status.get("wait-status")
        if isinstance(wait_status, int):
            exit_code, sig = self._decode(0, wait_status)
        else:  # no report (the reporter could not run, or died): the leader's status it is
            exit_code, sig = self._decode(popen.wait(), None)
        for event in drained:
            event.wait()
        self.journal.finish(exit_code, sig)
        with self._lock:
            self._state = "exited"
            self._finished_at = finished
            self._exit_code = exit_code
            self._signal = sig
        self._close_stdin_quietly()
        self._done.set()
        popen.wait()  # reap the subreaper (or bubblewrap) once the tree's last process ended
        if self._lingers:
            status_pipe.rest()  # bubblewrap's last line; closes the pipe

    def _decode(self, returncode: int, wait_status: Any) -> tuple[int | None, str | None]:
        if isinstance(wait_status, int):
            returncode = os.waitstatus_to_exitcode(wait_status)
            return (None, signal_name(-returncode)) if returncode < 0 else (returncode, None)
        if returncode < 0:
            return None, signal_name(-returncode)
        with self._lock:
            delivered = returncode - 128 in self._delivered
        if self._namespaced and returncode > 128 and delivered:
            return None, signal_name(returncode - 128)
        return returncode, None

    # -- queries -----------------------------------------------------------

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def tree_pids(self) -> list[int]:
        """Live OS processes of the tree (empty once it has fully exited)."""
        with self._lock:
            if self._tree_exited or self._tree is None:
                return []
            tree = self._tree
        pids = tree.members()
        if not pids and self._done.is_set():
            with self._lock:
                self._tree_exited = True
        return pids

    def tree_exited(self) -> bool:
        return self._done.is_set() and not self.tree_pids()

    def to_json(self) -> dict[str, Any]:
        tree_exited = self.tree_exited()
        stats = self.journal.stats()
        c = self.command
        with self._lock:
            return {
                "process_id": self.id,
                "kind": self.kind,
                "pid": self._pid,
                "state": self._state,
                "leader_exited": self._done.is_set(),
                "tree_exited": tree_exited,
                "exit_code": self._exit_code,
                "signal": self._signal,
                "created_at": timestamp(self._created_at),
                "finished_at": timestamp(self._finished_at),
                "cmd": c.cmd,
                "args": c.args,
                "cwd": c.cwd,
                "output": {
                    "oldest_seq": stats.oldest_seq,
                    "newest_seq": stats.newest_seq,
                    "bytes": stats.bytes,
                },
            }

    # -- control -----------------------------------------------------------

    def write_input(self, data: bytes) -> int:
        """Write to stdin; returns the input's sequence number."""
        with self._stdin_lock:
            if self._stdin is None:
                raise StdinClosed
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(self._stdin, view) :]
            except BrokenPipeError:
                raise StdinClosed from None
            self._input_seq += 1
            return self._input_seq

    def resize(self, rows: int, cols: int) -> None:
        """Set a terminal's size (the kernel sends SIGWINCH to its foreground group)."""
        with self._stdin_lock:
            if self._stdin is None:
                raise StdinClosed
            set_size(self._stdin, rows, cols)

    def close_stdin(self) -> None:
        with self._stdin_lock:
            if self._stdin is None:
                raise StdinClosed
            os.close(self._stdin)
            self._stdin = None

    def _close_stdin_quietly(self) -> None:
        with contextlib.suppress(StdinClosed):
            self.close_stdin()

    def send_signal(self, signum: int) -> None:
        """Deliver ``signum`` to every process of the tree."""
        with self._lock:
            tree = self._tree
            if signum not in (signal.SIGSTOP, signal.SIGCONT):
                self._delivered.add(signum)
        if tree is not None:
            tree.signal(signum)

    def freeze(self) -> None:
        # Twice: a process forked while the first pass ran is caught by the second.
        self.send_signal(signal.SIGSTOP)
        self.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.send_signal(signal.SIGCONT)

    def kill(self) -> bool:
        """SIGKILL the tree until it is gone; True if it is."""
        deadline = time.monotonic() + KILL_TIMEOUT
        while self.tree_pids():
            if time.monotonic() > deadline:
                return False
            self.send_signal(signal.SIGKILL)
            time.sleep(0.01)
        self._done.wait(max(0.0, deadline - time.monotonic()))
        return True

    def terminate(self, grace: float) -> bool:
        """SIGTERM the tree, SIGKILL what remains after ``grace``; True if none remains."""
        with self._lock:
            if self._state == "running":
                self._state = "terminating"
        self.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.tree_pids() and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.kill() and self.tree_exited()

    def wait(self, scope: str, timeout: float) -> bool:
        """Wait until the leader (or the whole tree) has exited; False on timeout."""
        deadline = time.monotonic() + timeout
        if not self._done.wait(timeout):
            return False
        while scope == "tree" and self.tree_pids():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def abort(self) -> None:
        """The sandbox failed: the tree dies, and its streams end without an exit frame."""
        self.journal.abort()
        self.stop()

    def stop(self) -> None:
        """Kill the tree and release every thread and pipe (destroy, shutdown)."""
        self.kill()
        self._stopping = True
        self.journal.close()
        self._close_stdin_quietly()


@dataclass(frozen=True)
class _Ends:
    """The descriptors between the emulator and one leader."""

    child: tuple[int, int, int]  # the leader's stdin, stdout and stderr
    stdin: int  # where input is written
    outputs: list[tuple[int, str]]  # (descriptor, stream name) to pump into the journal

    @classmethod
    def pipes(cls) -> _Ends:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        return cls((in_r, out_w, err_w), in_w, [(out_r, "stdout"), (err_r, "stderr")])

    @classmethod
    def terminal(cls, rows: int, cols: int) -> _Ends:
        # Input goes to a second descriptor of the master: the pump closes its
        # own when the output ends, while a resize may still come.
        master, slave = open_terminal(rows, cols)
        return cls((slave, slave, slave), os.dup(master), [(master, PTY_STREAM)])

    def close_child(self) -> None:
        for fd in set(self.child):
            os.close(fd)

    def close_ours(self) -> None:
        for fd in {self.stdin, *(fd for fd, _ in self.outputs)}:
            os.close(fd)


class _StatusPipe:
    """JSON lines from bubblewrap's --json-status-fd and from the status reporter."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""
        self._seen: dict[str, Any] = {}

    def until(self, key: str) -> dict[str, Any]:
        """Block until a line with ``key`` (or EOF) has been read; everything seen so far."""
        while key not in self._seen and self._read():
            pass
        return dict(self._seen)

    def close(self) -> None:
        os.close(self._fd)

    def rest(self) -> dict[str, Any]:
        """After bubblewrap exited: whatever else is in the pipe, then close it."""
        # A process that inherited the pipe may keep it open: never wait for EOF.
        os.set_blocking(self._fd, False)
        try:
            while self._read():
                pass
        except BlockingIOError:
            pass
        os.close(self._fd)
        return dict(self._seen)

    def _read(self) -> bool:
        chunk = os.read(self._fd, 4096)
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                self._seen.update(obj)
        return bool(chunk)
