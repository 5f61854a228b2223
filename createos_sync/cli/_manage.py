"""The account commands: ``shapes``, ``ls``, ``destroy`` and ``reap``.

Every string of the service's that a table shows is checked first (``shown``):
an id, shape or name that does not look like one is replaced, so that a
hostile listing cannot write escape sequences (OSC 52, clear screen), bidi
overrides or C1 controls to the terminal. ``--json`` escapes everything
outside printable ASCII.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import types
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import attrs

from ..client import Client
from ..config import API_KEY_ENV, env_api_key, env_base_url, normalize_base_url
from ..errors import ConfigError, CreateosApiError
from ..journal import Entry, Journal, reap
from ..models import ID_PATTERN as ID
from ..models import STATUS_PATTERN as STATUS
from ..models import SandboxInfo
from ..models import shown_text as token
from ._local import account, add_local_flag
from ._report import EXIT_FAILURE, PROG, delete_each, say

# What a sandbox's or template's name may look like on the terminal.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._:/@+=-]{0,127}\Z")


def add_parsers(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    shapes = commands.add_parser("shapes", parents=[common], help="list the machine shapes")
    shapes.add_argument("--json", action="store_true", help="one JSON array of objects")
    add_local_flag(shapes)
    shapes.set_defaults(handler=list_shapes)

    ls = commands.add_parser("ls", parents=[common], help="list the sandboxes of the account")
    ls.add_argument("--json", action="store_true", help="one JSON array, an object per sandbox")
    add_local_flag(ls)
    ls.set_defaults(handler=list_sandboxes)

    destroy = commands.add_parser(
        "destroy", parents=[common], help="destroy sandboxes (one already gone is fine: said so)"
    )
    destroy.add_argument("ids", nargs="+", type=id_argument, metavar="ID")
    add_local_flag(destroy)
    destroy.set_defaults(handler=destroy_sandboxes)

    reaper = commands.add_parser(
        "reap",
        parents=[common],
        help="destroy the sandboxes of leases whose process died",
        description="Destroy the sandboxes that the local lease journal knows and whose "
        "owning process is gone (killed, crashed), then forget them. Entries of a local "
        "emulator that no longer answers are forgotten: its sandboxes ended with it. Exits 1 "
        "if a sandbox could not be destroyed or a journal entry could not be read (it is kept "
        "for a human).",
    )
    reaper.add_argument(
        "--dry-run",
        action="store_true",
        help="say what would be done, do nothing (needs no API key: it reads the journal)",
    )
    add_local_flag(reaper)
    reaper.add_argument(
        "--all",
        action="store_true",
        help="also destroy the sandboxes of owners that still run (a notebook kernel), "
        "asking to confirm each owner by typing its pid",
    )
    reaper.add_argument(
        "--owner",
        action="append",
        type=int,
        default=[],
        metavar="PID",
        help="also destroy the sandboxes of this still running owner, confirmed without asking "
        "(repeatable)",
    )
    reaper.set_defaults(handler=reap_orphans)


def list_shapes(args: argparse.Namespace) -> int:
    with account(local=args.local) as client:
        shapes = client.shapes()
    if args.json:
        _print_json([attrs.asdict(s) for s in shapes])
        return 0
    rows = [
        [shown(s.id), _blank(s.vcpu), _blank(s.memory_mib), _blank(s.default_disk_mib)]
        for s in shapes
    ]
    _print_table(["ID", "VCPU", "MEMORY_MIB", "DISK_MIB"], rows)
    return 0


def list_sandboxes(args: argparse.Namespace) -> int:
    with account(local=args.local) as client:
        sandboxes = client.sandboxes()
        base_url = client.config.base_url
    if args.json:
        _print_json([attrs.asdict(s, value_serializer=_jsonable) for s in sandboxes])
        return 0
    if not sandboxes:
        print("no sandboxes", flush=True)
        return 0
    try:
        entries = Journal().entries()
    except OSError:  # the notes are a courtesy: the listing stands without them
        entries = []
    orphans = {
        e.sandbox_id
        for e in entries
        if e.base_url == base_url and e.sandbox_id and e.owner_alive() is False
    }
    rows = [
        [
            shown(s.id),
            shown(s.status, STATUS),
            shown(s.shape),
            shown(s.name, NAME),
            s.created_at.isoformat(timespec="seconds") if s.created_at else "",
            "orphaned: see `createos-sync reap`" if s.id in orphans else "",
        ]
        for s in sandboxes
    ]
    _print_table(["ID", "STATUS", "SHAPE", "NAME", "CREATED", ""], rows)
    return 0


def destroy_sandboxes(args: argparse.Namespace) -> int:
    """Destroy each id: 0 if every one is destroyed or known and gone, 2 if one was never
    seen (a typo is not a success), 1 if a destruction failed."""
    journal = Journal()
    known = {entry.sandbox_id for entry in journal.entries()}

    def gone(sandbox_id: str) -> str | None:
        how = _gone_status(client, sandbox_id)
        return how or ("destroyed" if sandbox_id in known else None)

    def forget(sandbox_id: str) -> None:
        for entry in journal.entries():
            if entry.sandbox_id == sandbox_id:
                journal.remove(entry.name)

    with account(local=args.local) as client:
        return delete_each(
            args.ids, client.destroy, doing="destroying", done="destroyed", gone=gone,
            never_seen=f"no such sandbox {{id}}: never seen here (`{PROG} ls` lists them)",
            then=forget,
        )  # fmt: skip


def _gone_status(client: Client, sandbox_id: str) -> str | None:
    """The status of a sandbox that refused a destroy, if the service still knows it
    (``destroying``, ``destroyed``); None if it never did (1 request)."""
    try:
        info = client.sandbox(sandbox_id)
    except CreateosApiError as exc:
        if exc.status == 404:
            return None
        raise
    return shown(info.status, STATUS)


def reap_orphans(args: argparse.Namespace) -> int:
    owners = set(args.owner)
    everything = args.all or bool(owners)
    confirm = None if args.dry_run else _confirmation(owners, ask=args.all)
    with _reaper(args) as client:
        outcomes = reap(client, dry_run=args.dry_run, all=everything, confirm=confirm)
    for outcome in outcomes:
        print(outcome.describe(), flush=True)
    if not outcomes:
        print("the lease journal is empty: nothing to reap", flush=True)
    return EXIT_FAILURE if any(o.needs_attention for o in outcomes) else 0


def _reaper(args: argparse.Namespace) -> contextlib.AbstractContextManager[Client]:
    """The client ``reap`` works with; a dry run without a key reads the journal only."""
    if args.dry_run and not args.local and env_api_key() is None:
        return contextlib.nullcontext(cast(Client, _JournalOnly()))
    return account(local=args.local)


class _JournalOnly:
    """What a dry run of ``reap`` needs without a key: the base URL its entries are
    matched with. Finding an entry's sandbox by name would need a request: it fails."""

    def __init__(self) -> None:
        url = env_base_url()
        self.config = types.SimpleNamespace(base_url=normalize_base_url(url))

    def sandboxes(self) -> list[SandboxInfo]:
        raise ConfigError(f"finding it by name needs {API_KEY_ENV}")


def _confirmation(owners: set[int], *, ask: bool) -> Callable[[Entry], bool]:
    """Confirm a live owner: named with --owner, or (with --all) its pid typed at a prompt."""
    answers: dict[int, bool] = {}

    def confirm(entry: Entry) -> bool:
        if entry.pid in owners:
            return True
        if ask and entry.pid not in answers:
            answers[entry.pid] = _ask(entry.pid)
        return answers.get(entry.pid, False)

    return confirm


def _ask(pid: int) -> bool:
    if not sys.stdin.isatty():
        say(f"process {pid} still runs: not confirmed (without a terminal, use --owner {pid})")
        return False
    try:
        command = (
            Path(f"/proc/{pid}/cmdline")
            .read_bytes()
            .replace(b"\0", b" ")
            .decode("utf-8", "replace")
        )
    except OSError:
        command = "?"
    sys.stderr.write(
        f"process {pid} ({command.strip()[:120]}) still runs and holds a lease.\n"
        "Type its pid to destroy its sandboxes anyway: "
    )
    sys.stderr.flush()
    return sys.stdin.readline().strip() == str(pid)


def id_argument(text: str) -> str:
    """An id typed on the command line: refused before any request unless it looks like one."""
    if not ID.match(text):
        raise argparse.ArgumentTypeError(f"not an id: {text!r}")
    return text


def shown(value: object, pattern: re.Pattern[str] = ID) -> str:
    """A server's string fit for the terminal: as given if it matches ``pattern``, "" if
    absent, else a placeholder."""
    return token(value, pattern) or ""


def _blank(value: object) -> str:
    return "" if value is None else str(value)


def _jsonable(instance: object, field: object, value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def _print_json(items: list[dict[str, Any]]) -> None:
    json.dump(items, sys.stdout, indent=1)
    print(flush=True)


def _print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    for line in [headers, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    sys.stdout.flush()
