"""MkDocs hook: pages made from the code at build time, so that they cannot drift from it.

``reference/cli.md`` holds the marker ``<!-- generated: cli -->``; it is replaced by
every command, sub-command and flag of ``createos-sync``, read from its argparse parsers
(the same parsers ``main()`` uses). ``tests/test_docs_site.py`` checks that the output
names every option string of every parser.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CLI_MARKER = "<!-- generated: cli -->"
KEYWORDS_MARKER = "<!-- generated: lease-keywords -->"


def _import_parsers() -> tuple[argparse.ArgumentParser, Any]:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from createos_sync import cli
    from createos_sync.emulator import __main__ as emulator_main

    return cli._parser(), emulator_main._parser


def _subcommands(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each sub-command, in the order ``--help`` lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def _escape(text: str) -> str:
    """Text for a Markdown table cell: Markdown's specials escaped outside code spans."""
    parts = text.replace("|", "\\|").split("`")
    for i in range(0, len(parts), 2):  # the even parts lie outside backticks
        parts[i] = parts[i].replace("<", "&lt;").replace("*", "\\*").replace("_", "\\_")
    return "`".join(parts)


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            metavar = ""
            if action.nargs != 0:
                metavar = " " + (
                    action.metavar
                    if isinstance(action.metavar, str)
                    else "{" + ",".join(map(str, action.choices)) + "}"
                    if action.choices
                    else action.dest.upper()
                )
            name = ", ".join(f"`{flag}{metavar}`" for flag in action.option_strings)
        else:
            name = f"`{action.metavar or action.dest}`"
        help_text = " ".join((action.help or "").split())
        extras = []
        if action.choices and action.option_strings:
            extras.append("one of: " + ", ".join(map(str, action.choices)))
        default = action.default
        if (
            action.option_strings
            and default not in (None, False, argparse.SUPPRESS, [])
            and "default" not in help_text
            and action.nargs != 0
        ):
            extras.append(f"default: {default}")
        if extras:
            help_text = f"{help_text} ({'; '.join(extras)})".strip()
        rows.append(f"| {name} | {_escape(help_text.strip())} |")
    return rows


def _command_section(
    title: str, parser: argparse.ArgumentParser, summary: str, level: int
) -> list[str]:
    lines = [f"{'#' * level} `{title}`", ""]
    if summary:
        lines += [_escape(summary[0].upper() + summary[1:]) + ".", ""]
    lines += ["```text", parser.format_usage().strip(), "```", ""]
    if parser.description and parser.description.strip() != summary:
        if parser.formatter_class is argparse.RawDescriptionHelpFormatter:  # laid out by hand
            lines += ["```text", parser.description.strip(), "```", ""]
        else:
            lines += [_escape(" ".join(parser.description.split())), ""]
    rows = _option_rows(parser)
    if rows:
        lines += ["| argument | meaning |", "|---|---|", *rows, ""]
    if parser.epilog:
        lines += ["```text", parser.epilog.strip(), "```", ""]
    return lines


def cli_reference() -> str:
    """The command line's reference, in Markdown, from its parsers."""
    # argparse wraps usage lines to the terminal's width: the same page from any terminal
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        return _cli_reference()
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns


def _cli_reference() -> str:
    parser, emulator_parser = _import_parsers()
    prog = parser.prog
    lines = _command_section(prog, parser, "", 2)
    for name, summary, sub in _subcommands(parser):
        if name == "emulator":  # its own parser, handed its arguments by main()
            sub = emulator_parser(f"{prog} emulator")
        lines += _command_section(f"{prog} {name}", sub, summary, 2)
        for action_name, action_summary, action_parser in _subcommands(sub):
            lines += _command_section(
                f"{prog} {name} {action_name}", action_parser, action_summary, 3
            )
    return "\n".join(lines)


def lease_keywords() -> str:
    """The lease keywords' table, from the text ``cs.lease``'s decorator appends to the
    docstrings at run time (which the static reading of mkdocstrings does not see)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from createos_sync.lease._options import KEYWORDS, KEYWORDS_DOC

    entries: list[list[str]] = []
    for line in KEYWORDS_DOC.splitlines()[1:]:
        name, sep, text = line.strip().partition(": ")
        if line.startswith("    ") and not line.startswith("        ") and sep:
            entries.append([name, text])
        elif line.strip():
            entries[-1][1] += " " + line.strip()
    named = {name for name, _ in entries}
    missing = (KEYWORDS | {"shape"}) - named
    if missing:  # the table would lie by omission: fail the build
        raise ValueError(f"KEYWORDS_DOC does not describe {sorted(missing)}")
    rows = [f"| `{name}` | {_escape(text.replace('``', '`'))} |" for name, text in entries]
    return "\n".join(["| keyword | meaning |", "|---|---|", *rows])


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if KEYWORDS_MARKER in markdown:
        markdown = markdown.replace(KEYWORDS_MARKER, lease_keywords())
    return markdown
