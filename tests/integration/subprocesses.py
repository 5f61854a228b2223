"""Running the CLI, the examples and user scripts in subprocesses against the session emulator."""

from __future__ import annotations

import fcntl
import os
import pty
import selectors
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Sequence
from typing import Any

from createos_sync.emulator import Emulator

CLI = (sys.executable, "-m", "createos_sync")
# Generous: the machine is small and shared; these bound hangs, they time nothing.
DEADLINE = 60.0


def emulator_env(emulator: Emulator, **extra: str) -> dict[str, str]:
    """This process's environment, pointed at ``emulator`` and the test's state directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CREATEOS_")}
    env.update(
        CREATEOS_API_URL=emulator.url,
        CREATEOS_API_KEY=emulator.api_key,
        CREATEOS_SYNC_STATE_DIR=os.environ["CREATEOS_SYNC_STATE_DIR"],
        CREATEOS_SYNC_AUTO_REAP="off",  # as in this process (tests/conftest.py)
        PYTHONUNBUFFERED="1",
        PYTHONFAULTHANDLER="1",  # a hung child shows where it waits (see finish)
    )
    env.update(extra)
    return env


def spawn(argv: Sequence[str], env: dict[str, str], **kwargs: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        list(argv),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kwargs,
    )


def finish(proc: subprocess.Popen[bytes]) -> tuple[int, str, str]:
    """Wait for the process; its exit status, stdout and stderr."""
    try:
        out, err = proc.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # with PYTHONFAULTHANDLER: every thread's stack
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        raise AssertionError(
            f"{proc.args!r} did not finish; stdout: {out.decode()[-1000:]!r}; "
            f"stderr: {err.decode()[-4000:]}"
        ) from None
    return proc.returncode, out.decode(), err.decode()


def run_all(*argvs: Sequence[str], env: dict[str, str]) -> list[tuple[int, str, str]]:
    """Run several commands concurrently (each pays an interpreter start-up)."""
    procs = [spawn(argv, env) for argv in argvs]
    return [finish(p) for p in procs]


def read_until(proc: subprocess.Popen[bytes], marker: bytes) -> bytes:
    """Read ``proc``'s stdout until ``marker`` appears; what was read."""
    assert proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + DEADLINE
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while marker not in seen:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise AssertionError(f"{marker!r} never came; got {seen!r}")
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"stdout ended before {marker!r}; got {seen!r}")
            seen += chunk
    return seen


class Terminal:
    """A command whose stdout and stderr are a pseudo-terminal, as in a user's shell.

    The command leads a session of its own with the terminal as its controlling
    terminal, so bytes typed with ``type()`` (``b"\\x03"`` is Ctrl-C) reach it as a
    user's keys would: the terminal echoes them and turns Ctrl-C into SIGINT.
    """

    def __init__(self, argv: Sequence[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        # 24 rows of 100 columns: a new pseudo-terminal has no size until someone sets one.
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
        # setsid(1) --ctty: a new session whose controlling terminal is its stdin (no
        # preexec_fn, which is unsafe in a process with threads). Not a group leader,
        # setsid execs the command in place: self.proc is the command itself.
        self.proc = subprocess.Popen(
            ["setsid", "--ctty", *argv], env=env, stdin=slave, stdout=slave, stderr=slave
        )
        os.close(slave)
        self.screen = b""

    def read_until(self, marker: bytes) -> bytes:
        """Read what the terminal shows until ``marker`` appears; everything shown so far."""
        deadline = time.monotonic() + DEADLINE
        while marker not in self.screen:
            if time.monotonic() > deadline or not self._read(deadline - time.monotonic()):
                raise AssertionError(f"{marker!r} never showed; the screen: {self.screen!r}")
        return self.screen

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def finish(self) -> tuple[int, str]:
        """Wait for the command; its exit status and the whole screen (CR LF made LF)."""
        deadline = time.monotonic() + DEADLINE
        while self._read(max(0.0, deadline - time.monotonic())):
            pass
        try:
            status = self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            os.close(self.master)
        return status, self.screen.decode("utf-8", "replace").replace("\r\n", "\n")

    def _read(self, timeout: float) -> bool:
        with selectors.DefaultSelector() as selector:
            selector.register(self.master, selectors.EVENT_READ)
            if timeout <= 0 or not selector.select(timeout):
                return False
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every process holding the terminal has gone
            return False
        self.screen += chunk
        return bool(chunk)
