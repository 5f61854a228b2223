"""``createos-sync run``: one command in a fresh sandbox, live output, and its exit status.

The exit status is the command's own; 124 when it timed out (as with
``timeout(1)``), 128 + N when it was killed by signal N, and 128 + N when
this CLI received signal N (130 for Ctrl-C) after cleaning up like
``Lease.close()``. Without ``--timeout`` the command has no time limit.

The command's stdout and stderr are copied byte for byte to this
process's own (``run(..., text=False)``), so ``run -- 'tar czf - d' | tar
tz`` works, on a terminal and off. ``--keep`` prints the sandbox's id
on stdout, first, before the command's output.

Piped or redirected stdin (anything but a terminal) is CMD's stdin: it is
staged in the sandbox before CMD starts, streamed in constant memory (1
more request), as ``run(stdin=...)`` does; an empty one costs nothing.

Uploads happen before the command, downloads after it whatever its exit
status; a local directory is uploaded as a tree, and a remote directory is
downloaded as one (one exec request asks the sandbox which download paths
are directories, for all of them at once). Transfers draw a progress bar
when stderr is a terminal.

A shape (or rootfs) that the service refuses is a usage error: on that
failure only, one catalog request finds out whether the name is unknown.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import sys
from collections.abc import Sequence
from typing import BinaryIO

from .. import checks
from ..client import Client
from ..config import SHAPE_ENV, default_shape
from ..errors import CreateosApiError, CreateosError, Operation, OperationTimeout
from ..lease import DEFAULT_TTL, Lease
from ..models import ID_PATTERN, shown_text
from ..process import EOF_KEY, Process
from ..result import RunResult
from . import _local
from . import _run_args as _args
from ._keystrokes import Typist
from ._report import EXIT_FAILURE, PROG, UsageError, say, say_failure
from ._signals import signals_interrupt
from ._tty import forwarding_resizes, local_term, window_size

EXIT_TIMEOUT = 124
# Without --timeout a command runs until it ends (or Ctrl-C), not for the SDK's
# default of one operation timeout: the run API needs a finite number.
NO_TIMEOUT = 7 * 24 * 3600.0
STDIN_PATIENCE = 2.0  # seconds of silence on piped stdin before saying what is awaited
ENDING = 5.0  # seconds for a command's end to be seen once its terminal refused a key

DESCRIPTION = """\
Run CMD in a new sandbox, stream its output live, and exit with its exit status.
The sandbox is destroyed afterwards, also on Ctrl-C, SIGTERM and SIGHUP, unless
--keep is given. A single CMD argument runs as a bash script ('echo a && echo b');
several run as argv, each item quoted. Uploads and downloads show progress bars
when stderr is a terminal.

Piped or redirected stdin ('echo hi | createos-sync run -- cat') is read to its
end and given to CMD, streamed, before CMD starts ('< /dev/null' gives none);
stdin from a terminal is not forwarded (CMD reads an empty one: type into
`createos-sync shell` instead).
"""

EPILOG = """\
exit status:
  N         the command's own exit status
  124       the command timed out (--timeout); its processes were terminated
  128+N     the command was killed by signal N (137 for SIGKILL)
  130       interrupted by Ctrl-C (SIGINT)
  143, 129  stopped by SIGTERM, SIGHUP (the sandbox is cleaned up in every case)
  2         usage or configuration error, or a shape, rootfs, disk or network not found
  1         API, transfer or cleanup failure (a failed download turns 0 into 1)
"""
HELP_HINT = "see `createos-sync run --help`"


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    parser = commands.add_parser(
        "run",
        parents=[common],
        help="run a command in a new sandbox",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--shape", help="machine shape (default: $CREATEOS_SHAPE or s-1vcpu-1gb)")
    parser.add_argument("--rootfs", help="root file system image, or a ready template's id")
    parser.add_argument(
        "--fork-from", metavar="ID", help="run in a new fork of this sandbox (running or paused)"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        type=_args.env_item,
        metavar="K=V",
        help="an environment variable for CMD (K alone passes this machine's value); repeatable",
    )
    parser.add_argument("--cwd", metavar="DIR", help="working directory of CMD")
    parser.add_argument(
        "--timeout",
        type=_args.seconds,
        metavar="SECONDS",
        help="terminate CMD after this long and exit 124 (default: no limit here; in Python, "
        "run() stops a command after 300 s and returns timed_out=True unless given timeout=)",
    )
    parser.add_argument(
        "--upload",
        action="append",
        default=[],
        type=_args.upload_spec,
        metavar="LOCAL:REMOTE",
        help="copy a local file (or directory) to an absolute sandbox path before CMD; repeatable",
    )
    parser.add_argument(
        "--download",
        action="append",
        default=[],
        type=_args.download_spec,
        metavar="REMOTE:LOCAL",
        help="copy a sandbox file or directory here after CMD, even if it failed; repeatable",
    )
    parser.add_argument(
        "--disk",
        action="append",
        default=[],
        type=_args.disk_spec,
        metavar="NAME:/MOUNT/PATH",
        help="mount a persistent disk (its name or id) at an absolute path; detached (flushed) "
        "before the sandbox goes; repeatable",
    )
    parser.add_argument(
        "--network",
        action="append",
        default=[],
        metavar="NAME",
        help="join a private network of the account (its name or id); repeatable",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the sandbox running and print its id on stdout, first (ID=$(... --keep ...))",
    )
    parser.add_argument(
        "--ttl",
        type=_args.ttl,
        default=...,
        metavar="SECONDS",
        help="the sandbox deletes itself this long after this CLI stops renewing it, even if "
        f"the CLI is killed (default {DEFAULT_TTL:g}; 0 turns it off)",
    )
    parser.add_argument(
        "--tty",
        action="store_true",
        help="run CMD on a terminal the size of this window (else 80x24), resized with it: "
        "live output on stdout, stderr merged in as a terminal shows it; CMD reads end of "
        "input at once",
    )
    parser.add_argument(
        "--local",
        action="store_true",
        help="run on the emulator that `createos-sync emulator` serves, else on an in-process "
        "one (no account needed; an in-process emulator's sandboxes end with it)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD [ARG...]")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """The ``run`` subcommand; returns the exit status (see the module docstring)."""
    command = _command(args.command)
    env = dict(args.env)
    try:
        checks.command(command, cwd=args.cwd, env=env)
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc), hint=HELP_HINT) from None
    if args.fork_from and (args.shape or args.rootfs):
        raise UsageError(
            "--fork-from takes its source's shape and rootfs: drop --shape/--rootfs",
            hint=HELP_HINT,
        )
    if (args.disk or args.network) and _local.in_process(local=args.local):
        raise UsageError(
            "--disk and --network with --local name resources of the emulator that "
            f"`{PROG} emulator` serves, and none serves: an in-process one has none",
            hint=HELP_HINT,
        )
    if args.local and args.keep:
        _keep_needs_a_standalone_emulator()
    stdin = _piped_stdin(tty=args.tty)
    with signals_interrupt(), _local.client(local=args.local) as client:
        # The in-process emulator's sandboxes die with it: nothing for `reap` to find later.
        lease = client.lease(
            args.shape,
            rootfs=args.rootfs,
            fork_from=args.fork_from,
            on_exit="keep" if args.keep else None,
            journal=not _local.in_process(local=args.local),
            ttl=args.ttl,
            disks=_disks_named(client, args.disk) or None,
            networks=_networks_named(client, args.network) or None,
        )
        open_lease(lease, client, args)
        with lease as box:
            if args.keep:  # said at once, so that an interrupted run still tells
                print(box.id, flush=True)  # for ID=$(createos-sync run --keep ...)
                again = f"createos-sync destroy{' --local' if args.local else ''} {box.id}"
                say(f"keeping sandbox {box.id} (destroy it with: {again})")
            for local, remote in args.upload:
                _upload(box, local, remote)
            timeout = args.timeout or NO_TIMEOUT
            if args.tty:
                status = _on_terminal(box, command, cwd=args.cwd, env=env, timeout=timeout)
            else:
                result = box.run(
                    command,
                    cwd=args.cwd,
                    env=env,
                    stdin=stdin,
                    timeout=timeout,
                    echo=True,
                    text=False,  # byte for byte: a pipeline gets what CMD wrote
                    max_output=0,  # everything went to stdout / stderr already
                )
                status = _status(result)
            if not _download_all(box, args.download, debug=args.debug) and status == 0:
                status = EXIT_FAILURE
    return status


def _disks_named(client: Client, mounts: list[tuple[str, str]]) -> dict[str, str]:
    """Mount path -> the id of the disk named (by name or id): 1 listing, if any."""
    if not mounts:
        return {}
    known = [(d.id, d.name) for d in client.disks()]
    return {path: _one_named("disk", known, name) for path, name in mounts}


def _networks_named(client: Client, names: list[str]) -> list[str]:
    """The ids of the networks named (by name or id): 1 listing per 500 networks, if any."""
    if not names:
        return []
    known = [(n.id, n.name) for n in client.networks()]
    return [_one_named("network", known, name) for name in names]


def _one_named(kind: str, known: Sequence[tuple[str, str | None]], name: str) -> str:
    """The id of the one ``kind`` named ``name`` (its name or id); a usage error (status 2,
    as for an unknown shape) when the account has none, or several."""
    found = [ident for ident, known_name in known if name in (ident, known_name)]
    if len(found) != 1:
        if not found:
            raise UsageError(f"no {kind} is named {name!r}", hint=HELP_HINT)
        raise UsageError(f"several {kind}s are named {name!r}: give its id", hint=HELP_HINT)
    return found[0]


def open_lease(lease: Lease, client: Client, args: argparse.Namespace) -> None:
    """Open the lease; a creation refused for an unknown shape or rootfs is a usage error,
    followed by a pointer to the command's ``--help``.

    ``args`` has ``shape`` and ``rootfs`` (``run`` and ``shell`` share this).
    """
    try:
        lease.open()
    except CreateosApiError as exc:
        if exc.status == 400 and exc.operation == Operation.SANDBOX_CREATION:
            unknown = _unknown_name(client, args)
            if unknown is not None:
                raise UsageError(unknown, hint=f"see `{PROG} {args.command_name} --help`") from None
        raise


def _unknown_name(client: Client, args: argparse.Namespace) -> str | None:
    """Which asked-for name the catalog does not know (1 request, 2 for a rootfs), if any."""
    shape = args.shape or default_shape()
    try:
        shapes = [s.id for s in client.shapes()]
        if shape not in shapes:
            source = "" if args.shape else f" (from {SHAPE_ENV})"
            return f"unknown shape {shape!r}{source}: the shapes are {_names(shapes)}"
        if args.rootfs is None:
            return None
        names = client.rootfs()
    except CreateosError:  # the catalog cannot help: the service's own refusal stands
        return None
    if args.rootfs in names:
        return None
    return (
        f"unknown rootfs {args.rootfs!r}: the root file systems are {_names(names)} "
        "(or the id of a ready template)"
    )


def _names(names: list[str], most: int = 40) -> str:
    """Catalog names as the service gave them, if they look like names (at most ``most``)."""
    shown = [n for n in names if shown_text(n, ID_PATTERN) == n][:most]
    return ", ".join(shown) if shown else "(none listed)"


def _command(words: list[str]) -> str | list[str]:
    if words and words[0] == "--":
        words = words[1:]
    if not words:
        raise UsageError(
            "no command given: createos-sync run [OPTIONS] -- CMD [ARG...]", hint=HELP_HINT
        )
    return words[0] if len(words) == 1 else words


def _on_terminal(
    box: Lease, command: str | list[str], *, cwd: str | None, env: dict[str, str], timeout: float
) -> int:
    """``run --tty``: CMD on a terminal the size of this window, resized with it; its status.

    A background process rather than ``run()``, which has no handle to resize
    through: 1 more request (the Ctrl-D that ``run()`` sends with the start
    gate's key), and 1 per resize, paced like the keys of ``shell``.
    """
    window = sys.stdout.fileno()
    process = box.start(
        command,
        cwd=cwd,
        env={**local_term(), **env},
        echo=True,
        text=False,  # the terminal's own bytes, to this terminal
        max_output=0,  # everything is on the screen already
        pty=window_size(window),
    )
    _type_end_of_input(process)
    typist = Typist(process.send, process.resize)
    try:
        with forwarding_resizes(window, typist.resize):
            result = process.wait(timeout)
    except OperationTimeout:
        process.terminate()
        return _timed_out(timeout)
    finally:
        typist.close(timeout=5.0)
    return _status(result)


def _type_end_of_input(process: Process[bytes], ending: float = ENDING) -> None:
    """Type Ctrl-D, as ``run()`` does: nobody types, so a command reading lines sees the end.

    A command that has ended already refuses input (its terminal is closed):
    that refusal is no error, as long as the end is seen within ``ending`` seconds of it.
    """
    try:
        process.send(EOF_KEY)
    except CreateosApiError:
        with contextlib.suppress(OperationTimeout):
            process.wait(ending)
        if process.running:
            raise


def _keep_needs_a_standalone_emulator() -> None:
    """``--keep --local``: fine on the emulator that ``createos-sync emulator`` serves, not on
    an in-process one, which ends with this command."""
    if _local.in_process(local=True):
        raise UsageError(
            "--keep cannot be used with --local unless `createos-sync emulator` serves in "
            "another terminal: an in-process emulator ends with this command",
            hint=HELP_HINT,
        )


def _piped_stdin(*, tty: bool) -> BinaryIO | None:
    """This process's stdin when it is piped or redirected and not empty, else None.

    Peeking waits for the first byte (or the end) before any sandbox exists.
    """
    source = sys.stdin.buffer if sys.stdin is not None else None
    if source is None or source.isatty() or not _peek(source):
        return None
    if tty:
        raise UsageError(
            "--tty types into CMD's terminal: it cannot also read piped stdin", hint=HELP_HINT
        )
    return source


def _peek(source: BinaryIO) -> bytes:
    """The first byte of ``source`` left in its buffer ("" at its end); a wait says why."""
    peek = getattr(source, "peek", None)
    if not callable(peek):
        return b"?"  # cannot tell without reading: forward it
    with contextlib.suppress(OSError, ValueError):
        if not select.select([source], [], [], STDIN_PATIENCE)[0]:
            say("waiting for piped stdin to end before CMD starts ('< /dev/null' gives none)")
    return bytes(peek(1))


def _timed_out(limit: float | None) -> int:
    after = f" after {limit:g} s" if limit else ""
    say(f"timed out{after}: the command's processes were terminated")
    return EXIT_TIMEOUT


def _status(result: RunResult[bytes]) -> int:
    if result.timed_out:
        return _timed_out(result.timeout)
    if result.signal is not None:
        say(f"the command was killed by {result.signal}")
        try:
            return 128 + signal.Signals[result.signal].value
        except KeyError:
            return EXIT_FAILURE
    return result.exit_code if result.exit_code is not None else EXIT_FAILURE


def _download_all(box: Lease, downloads: list[tuple[str, str]], *, debug: bool) -> bool:
    """Try every download, report each failure (with ``--debug``, its traceback); True if
    all succeeded."""
    try:
        unsure = [remote for remote, _ in downloads if not remote.endswith("/")]
        directories = box._remote_directories(unsure)
    except CreateosError as exc:
        say_failure("finding out which download paths are directories", exc, debug=debug)
        return False
    succeeded = True
    for remote, local in downloads:
        try:
            _download(box, remote, local, directory=remote in directories or remote.endswith("/"))
        except (CreateosError, OSError) as exc:
            say_failure(f"downloading {remote} to {local}", exc, debug=debug)
            succeeded = False
    return succeeded


def _progress() -> bool | None:
    return True if sys.stderr.isatty() else None  # logs and pipes stay clean


def _upload(box: Lease, local: str, remote: str) -> None:
    try:
        if os.path.isdir(local):
            box.upload_dir(local, remote, progress=_progress())
        else:
            box.upload(local, remote, progress=_progress())
    except (CreateosError, OSError) as exc:
        raise CreateosError(f"uploading {local} to {remote} failed: {exc}") from exc


def _download(box: Lease, remote: str, local: str, *, directory: bool) -> None:
    if directory:
        box.download_dir(remote.rstrip("/") or "/", local, progress=_progress())
    else:
        box.download(remote, local, progress=_progress())
