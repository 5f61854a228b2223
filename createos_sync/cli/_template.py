"""``createos-sync template build | ls | rm``: templates from the command line.

``template build NAME [-f DOCKERFILE] [--base B]`` streams the build log
live on stdout and exits 0 once the template is ready (its id is said on
stderr), or 1 with the end of the log when the build failed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import attrs

from ..errors import TemplateBuildError
from ..models import TEMPLATE_STATUS_PATTERN as TEMPLATE_STATUS
from ._local import account, add_local_flag
from ._manage import NAME, _jsonable, _print_json, _print_table, id_argument, shown
from ._report import EXIT_FAILURE, PROG, UsageError, delete_each, say

BUILD_HINT = "see `createos-sync template build --help`"


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    parser = commands.add_parser(
        "template", parents=[common], help="build, list and delete templates"
    )
    actions = parser.add_subparsers(dest="template_action", required=True, metavar="ACTION")

    build = actions.add_parser(
        "build",
        parents=[common],
        help="build a template from a Dockerfile, streaming its log",
        description="Build a template (a root file system) from a Dockerfile; use it with "
        "`createos-sync run --rootfs ID` or `cs.lease(rootfs=ID)`.",
    )
    build.add_argument("name", metavar="NAME", help="the template's name")
    build.add_argument(
        "-f",
        "--file",
        default="Dockerfile",
        metavar="DOCKERFILE",
        help="the Dockerfile to build ('-' reads stdin; default: ./Dockerfile)",
    )
    build.add_argument("--base", help="the root file system to build on if there is no FROM")
    add_local_flag(build)
    build.set_defaults(handler=build_template)

    ls = actions.add_parser("ls", parents=[common], help="list the templates of the account")
    ls.add_argument("--json", action="store_true", help="one JSON array, an object per template")
    add_local_flag(ls)
    ls.set_defaults(handler=list_templates)

    rm = actions.add_parser(
        "rm",
        parents=[common],
        help="delete templates (an id the account does not have exits 2; sandboxes made from "
        "them are not affected)",
    )
    rm.add_argument("ids", nargs="+", type=id_argument, metavar="ID")
    add_local_flag(rm)
    rm.set_defaults(handler=delete_templates)


def build_template(args: argparse.Namespace) -> int:
    dockerfile = _read_dockerfile(args.file)
    with account(local=args.local) as client:
        try:
            template = client.build_template(args.name, dockerfile, base=args.base, echo=True)
        except (TypeError, ValueError) as exc:
            raise UsageError(str(exc), hint=BUILD_HINT) from None
        except TemplateBuildError as exc:  # its log is on the screen already: not twice
            tid = shown(exc.template_id)
            say(
                f"template {args.name!r} ({tid}) failed to build: its log is above; "
                f"delete it with `{PROG} template rm {tid}`"
            )
            return EXIT_FAILURE
    tid = shown(template.id)
    say(f"template {tid} ({shown(template.name, NAME)}) is ready: use it with --rootfs {tid}")
    return 0


def list_templates(args: argparse.Namespace) -> int:
    with account(local=args.local) as client:
        templates = client.templates()
    if args.json:
        _print_json([attrs.asdict(t, value_serializer=_jsonable) for t in templates])
        return 0
    if not templates:
        print("no templates", flush=True)
        return 0
    rows = [
        [
            shown(t.id),
            shown(t.status, TEMPLATE_STATUS),
            shown(t.name, NAME),
            shown(t.base),
            _when(t.created_at),
            _when(t.built_at),
        ]
        for t in templates
    ]
    _print_table(["ID", "STATUS", "NAME", "BASE", "CREATED", "BUILT"], rows)
    return 0


def delete_templates(args: argparse.Namespace) -> int:
    """Delete each id: 0 if every one is deleted, 2 if the account has no such template (a
    typo is not a success), 1 if a deletion failed."""
    with account(local=args.local) as client:
        return delete_each(
            args.ids, client.delete_template, doing="deleting", done="deleted",
            gone=lambda template_id: None,
            never_seen=f"no such template {{id}} (`{PROG} template ls` lists them)",
        )  # fmt: skip


def _read_dockerfile(name: str) -> str:
    try:
        raw = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise UsageError(
            f"cannot read the Dockerfile {os.path.abspath(name)}: {exc.strerror} "
            "(-f PATH names another; -f - reads stdin)",
            hint=BUILD_HINT,
        ) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{name} is not UTF-8 text", hint=BUILD_HINT) from None


def _when(moment: object) -> str:
    return moment.isoformat(timespec="seconds") if hasattr(moment, "isoformat") else ""
