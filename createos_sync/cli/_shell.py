"""``createos-sync shell``: an interactive login shell on a terminal in a sandbox.

The remote shell runs on a pseudo-terminal of the local window's size. The
local terminal is put in raw mode (``_tty``), so every key, Ctrl-C included,
goes to the remote terminal, which echoes it and turns Ctrl-C into SIGINT for
the remote program. Keys are sent in batches (``_keystrokes``); SIGWINCH is
forwarded as a resize. Output is written to stdout as it arrives.

The session ends when the remote shell exits (the CLI exits with its
status), when the connection is lost or a request fails (status 1), or when
the CLI gets SIGTERM, SIGHUP or SIGINT (128 + N). Whatever the way out, the
local terminal's mode is restored first, then the lease closes as
``Lease.close()`` does: the shell is terminated if it still runs, and a new
sandbox is destroyed (an existing one, given as SANDBOX_ID, is kept).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import sys
import threading

from ..lease import Lease
from ..process import Process
from ..result import RunResult
from . import _local
from ._keystrokes import Typist
from ._report import EXIT_FAILURE, UsageError
from ._run import open_lease
from ._signals import signals_interrupt
from ._tty import forwarding_resizes, local_term, raw_mode, window_size

LOGIN_SHELL = ["/bin/bash", "-l"]
HELP_HINT = "see `createos-sync shell --help`"
READ_SIZE = 65536
EXIT_HANGUP = 128 + signal.SIGHUP

DESCRIPTION = """\
Open an interactive login shell on a terminal in a new sandbox, destroyed when
the shell exits (also on SIGTERM, SIGHUP or a lost connection), or in the
existing sandbox SANDBOX_ID, which is kept. Every key goes to the remote
terminal, Ctrl-C included; the window size follows yours. Your terminal's mode
is restored however the session ends. Exits with the shell's exit status
(`exit 3` gives 3), 1 when a request failed or the connection was lost, 128+N
on signal N (143 SIGTERM, 129 SIGHUP). Needs a terminal on stdin (else 2).

Typing costs requests (300 a minute per machine): what is typed while a
request is in flight goes in the next one, and steady typing is paced to at
most 2 requests a second after a burst of 4, so a minute of continuous typing
costs about 123 requests, however fast; a key typed after a pause leaves at once.
"""


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    parser = commands.add_parser(
        "shell",
        parents=[common],
        help="an interactive shell in a new (or existing) sandbox",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--shape", help="machine shape (default: $CREATEOS_SHAPE or s-1vcpu-1gb)")
    parser.add_argument("--rootfs", help="root file system image, or a ready template's id")
    parser.add_argument(
        "--local",
        action="store_true",
        help="use the emulator that `createos-sync emulator` serves, else an in-process one "
        "(no account needed; an in-process emulator's sandboxes end with it)",
    )
    parser.add_argument(
        "sandbox_id", nargs="?", metavar="SANDBOX_ID", help="an existing sandbox (kept)"
    )
    parser.set_defaults(handler=shell)


def shell(args: argparse.Namespace) -> int:
    """The ``shell`` subcommand; returns the exit status (see the module docstring)."""
    stdin = sys.stdin.fileno()
    if not os.isatty(stdin):
        raise UsageError(
            "shell needs a terminal on stdin (to type into the sandbox's)", hint=HELP_HINT
        )
    if args.sandbox_id and (args.shape or args.rootfs):
        raise UsageError(
            "--shape and --rootfs choose a new sandbox: not with SANDBOX_ID", hint=HELP_HINT
        )
    in_process = _local.in_process(local=args.local)
    if args.sandbox_id and in_process:
        raise UsageError(
            "SANDBOX_ID cannot be used with --local: the emulator starts empty", hint=HELP_HINT
        )
    with signals_interrupt(), _local.client(local=args.local) as client:
        # The in-process emulator's sandboxes die with it: nothing for `reap` to find later.
        lease = client.lease(
            args.shape, rootfs=args.rootfs, sandbox_id=args.sandbox_id, journal=not in_process
        )
        open_lease(lease, client, args)
        with lease as box:
            return Session(box, stdin, sys.stdout.fileno()).run()


class Session:
    """One remote login shell wired to the local terminal."""

    def __init__(self, box: Lease, stdin: int, stdout: int) -> None:
        self._box = box
        self._stdin = stdin
        self._stdout = stdout
        # The watcher and the typist wake the key loop through this pipe.
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)  # a full pipe already says "wake up"
        self._wake_lock = threading.Lock()

    def run(self) -> int:
        try:
            process = self._box.start(
                LOGIN_SHELL,
                pty=window_size(self._stdin),
                env=local_term(),
                on_output=self._write,
                text=False,  # the remote terminal's bytes, as they are, to this one
                max_output=0,  # everything goes to the screen; nothing is kept
            )
            threading.Thread(target=self._watch, args=(process,), daemon=True).start()
            typist = Typist(process.send, process.resize, on_stop=self._wake)
            try:
                with raw_mode(self._stdin), forwarding_resizes(self._stdin, typist.resize):
                    self._pump(process, typist)
            finally:
                typist.close(timeout=5.0)
        finally:
            self._close_wake_pipe()
        if not process.running:
            return _exit_status(process.wait(timeout=0))
        if typist.error is not None:
            raise typist.error
        return EXIT_HANGUP  # the local terminal went away; closing the lease ends the shell

    def _pump(self, process: Process[bytes], typist: Typist) -> None:
        """Move keys from the local terminal to the typist until the shell or the typist ends."""
        while process.running and typist.error is None:
            readable, _, _ = select.select([self._stdin, self._wake_r], [], [])
            if self._wake_r in readable:
                os.read(self._wake_r, READ_SIZE)
            if self._stdin in readable:
                keys = os.read(self._stdin, READ_SIZE)
                if not keys:
                    return
                typist.type(keys)

    def _write(self, stream: str, output: bytes) -> None:
        data = memoryview(output)
        while data:
            data = data[os.write(self._stdout, data) :]

    def _watch(self, process: Process[bytes]) -> None:
        with contextlib.suppress(BaseException):  # its error is raised again by run()
            process.wait()
        self._wake()

    def _wake(self) -> None:
        with self._wake_lock:  # never a closed descriptor, whose number may be reused
            if self._wake_w >= 0:
                with contextlib.suppress(BlockingIOError):
                    os.write(self._wake_w, b".")

    def _close_wake_pipe(self) -> None:
        with self._wake_lock:
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._wake_w = -1


def _exit_status(result: RunResult[bytes]) -> int:
    """The shell's status; 128 + N when a signal ended it, as a local shell reports."""
    if result.exit_code is not None:
        return result.exit_code
    if result.signal is not None:
        with contextlib.suppress(KeyError):
            return 128 + signal.Signals[result.signal].value
    return EXIT_FAILURE
