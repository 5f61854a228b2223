"""The ``createos-sync`` command line (also ``python -m createos_sync``).

::

    createos-sync run [--shape S] [--env K=V]... [--upload LOCAL:REMOTE]... [--tty] -- CMD [ARG...]
    createos-sync shell [--local] [--shape S] [--rootfs R] [SANDBOX_ID]
    createos-sync shapes | ls [--json] | destroy ID... | reap [--dry-run] | emulator [--env]
    createos-sync template build NAME [-f DOCKERFILE] [--base B] | template ls | template rm ID...
    createos-sync token create|rotate|disable SANDBOX_ID

Every command takes ``--local``: the emulator that ``createos-sync emulator``
serves in another terminal (``run`` and ``shell`` fall back to an in-process
one). Piped stdin is ``run``'s command's stdin.

Configuration comes from the environment (``CREATEOS_API_KEY``,
``CREATEOS_API_URL``, ``CREATEOS_SHAPE``), as for ``cs.Client()``. Exit
statuses: the command's own for ``run`` (124 timeout, 128 + N for signal N,
130 Ctrl-C, 143 SIGTERM, 129 SIGHUP), 1 for a failure, 2 for a usage or
configuration error, and for anything named that the account does not have
(a shape, rootfs, disk, network, or a sandbox or template never seen: a
typo is not a success). A usage error is one line, then a pointer to ``--help``.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Sequence
from typing import NoReturn

from .. import __version__
from . import _manage, _run, _shell, _template, _token
from ._local import emulator_main
from ._report import EXIT_USAGE, PROG, guarded, logging_to_stderr


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and a pointer to ``--help``, not the usage block.

    Subcommand parsers are made of the same class.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(
            EXIT_USAGE,
            f"{PROG}: error: {message}{_did_you_mean(message)}\nsee `{self.prog} --help`\n",
        )


def _did_you_mean(message: str) -> str:
    """For argparse's "invalid choice: 'rnu' (choose from 'run', ...)": the closest choice."""
    found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if found is None:
        return ""
    # Quoted ('run', 'shell') or, in newer Pythons, bare (run, shell).
    choices = [choice.strip("'") for choice in found[2].split(", ")]
    close = difflib.get_close_matches(found[1], choices, n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else ""


def _parser() -> argparse.ArgumentParser:
    # --debug is accepted before and after the subcommand; SUPPRESS keeps the
    # subcommand's default from overwriting a --debug given before it.
    debug_help = "log everything, show tracebacks"
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)
    parser: argparse.ArgumentParser = _Parser(
        prog=PROG, description="Run commands in CreateOS sandboxes and manage them."
    )
    parser.add_argument("--debug", action="store_true", help=debug_help)
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command_name", required=True, metavar="COMMAND")
    _run.add_parser(commands, common)
    _shell.add_parser(commands, common)
    _manage.add_parsers(commands, common)
    _template.add_parser(commands, common)
    _token.add_parser(commands, common)
    commands.add_parser(
        "emulator",
        add_help=False,
        help="serve the local emulator (see `createos-sync emulator --help`)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``) and return the exit status."""
    parser = _parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if args.command_name == "emulator":
            return guarded(lambda: emulator_main(extra), debug=False)
        if extra:  # the subcommand's own parser would have said it: point to its help
            command = " ".join(
                n for n in (args.command_name, getattr(args, "template_action", None)) if n
            )
            parser.exit(
                EXIT_USAGE,
                f"{PROG}: error: unrecognized arguments: {' '.join(extra)}\n"
                f"see `{PROG} {command} --help`\n",
            )
    except SystemExit as exc:  # --help, --version, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    with logging_to_stderr(debug=args.debug):
        return guarded(lambda: int(args.handler(args)), debug=args.debug)


__all__ = ["main"]
