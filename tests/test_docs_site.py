"""The docs site (mkdocs.yml, docs/) builds strictly and its references match the code.

``mkdocs build --strict`` fails on any warning: a broken link or anchor, a page missing
from the navigation, a docstring mkdocstrings cannot read. The CLI reference is generated
from the parsers at build time (docs/hooks/generated.py); these tests check that it names
every command and flag, that the API reference names every public name, and that the
hand-written error tree, exit codes and environment variables agree with the code.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

import createos_sync as cs

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PACKAGE = ROOT / "createos_sync"


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hook", DOCS / "hooks" / "generated.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_the_site_builds_strictly_with_every_page(site: Path) -> None:
    for page in DOCS.rglob("*.md"):
        relative = page.relative_to(DOCS).with_suffix("")
        built = site / (
            "index.html"
            if relative.name == "index" and relative.parent == Path(".")
            else relative.parent / "index.html"
            if relative.name == "index"
            else relative / "index.html"
        )
        assert built.is_file(), built


# --- the command line ------------------------------------------------------------


def _parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(command, parser) for the CLI and every sub-command, as ``main()`` builds them."""
    from createos_sync import cli
    from createos_sync.emulator import __main__ as emulator_main

    def walk(
        prefix: str, parser: argparse.ArgumentParser
    ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
        yield prefix, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    if prefix == "createos-sync" and name == "emulator":
                        sub = emulator_main._parser("createos-sync emulator")
                    yield from walk(f"{prefix} {name}", sub)

    yield from walk("createos-sync", cli._parser())


def _sections(markdown: str) -> dict[str, str]:
    """The generated page cut at its command headings: command -> its text."""
    parts = re.split(r"^#{2,3} `([^`]+)`$", markdown, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_the_cli_reference_names_every_command_and_flag() -> None:
    sections = _sections(_hook().cli_reference())
    commands = dict(_parsers())
    assert set(sections) == set(commands)
    assert len(commands) > 10  # run, shell, ..., template build, token create, emulator
    for command, parser in commands.items():
        for action in parser._actions:
            for flag in action.option_strings:
                assert re.search(rf"`{re.escape(flag)}[ `]", sections[command]), (command, flag)


def test_the_built_cli_page_holds_the_generated_reference(site: Path) -> None:
    html = (site / "reference" / "cli" / "index.html").read_text()
    assert "generated: cli" not in html
    for command, parser in _parsers():
        assert f"<code>{command}</code>" in html, command
        for action in parser._actions:
            for flag in action.option_strings:
                assert f"<code>{flag}" in html, (command, flag)


def test_the_cli_check_can_fail() -> None:
    markdown = "## `createos-sync run`\n\n| `--shape SHAPE` | x |\n"
    assert set(_sections(markdown)) == {"createos-sync run"}
    assert not re.search(r"`--keep[ `]", _sections(markdown)["createos-sync run"])


# --- the Python API ----------------------------------------------------------------


def test_the_api_reference_documents_every_public_name(site: Path) -> None:
    page = (DOCS / "reference" / "api.md").read_text()
    html = (site / "reference" / "api" / "index.html").read_text()
    for name in cs.__all__:
        assert re.search(rf"^::: createos_sync\.{re.escape(name)}$", page, re.M), name
        assert f'id="createos_sync.{name}"' in html, name
    assert "| `ttl` |" in page or "dead man" in html  # the lease keywords were generated


# --- the error tree ------------------------------------------------------------------

TREE_LINE = re.compile(
    r"^(?P<indent>(?:[│ ] {3})*)(?:[├└]── )?(?P<name>[A-Z]\w+)(?: \(also (?P<also>[\w, ]+)\))?"
)


def error_tree() -> dict[str, tuple[str | None, set[str]]]:
    """name -> (parent in the tree, the other bases it names), from docs/reference/errors.md."""
    text = (DOCS / "reference" / "errors.md").read_text()
    block = text.split("```text\n", 1)[1].split("```", 1)[0]
    tree: dict[str, tuple[str | None, set[str]]] = {}
    stack: list[str] = []
    for line in block.splitlines():
        match = TREE_LINE.match(line)
        if not match:
            continue  # a continuation line of a description
        depth = len(match.group("indent")) // 4 + (1 if match.group(0).find("──") >= 0 else 0)
        del stack[depth:]
        also = {a.strip() for a in (match.group("also") or "").split(",") if a.strip()}
        tree[match.group("name")] = (stack[-1] if stack else None, also)
        stack.append(match.group("name"))
    return tree


def test_the_error_tree_is_the_class_hierarchy() -> None:
    tree = error_tree()
    public = {
        name
        for name in cs.__all__
        if inspect.isclass(getattr(cs, name)) and issubclass(getattr(cs, name), BaseException)
    }
    assert set(tree) == public
    for name, (parent, also) in tree.items():
        bases = {base.__name__ for base in getattr(cs, name).__bases__}
        expected = bases - {"Exception"}
        assert {parent, *also} - {None} == expected, name


def test_the_error_tree_parser_reads_depths() -> None:
    tree = error_tree()
    assert tree["CreateosError"] == (None, set())
    assert tree["LeaseExpired"] == ("SandboxUnavailable", set())
    assert tree["CommandTimeout"] == ("CommandFailed", {"TimeoutError"})


# --- exit codes and environment variables ------------------------------------------------


def test_every_exit_status_of_the_cli_is_in_the_table() -> None:
    text = (DOCS / "reference" / "exit-codes.md").read_text()
    listed = set(re.findall(r"^\| ([^|]+?) \|", text, re.M))
    from createos_sync.cli import _report, _run, _shell

    constants = {
        value
        for module in (_report, _run, _shell)
        for name, value in vars(module).items()
        if name.startswith("EXIT_") and isinstance(value, int)
    }
    signals = {128 + signal.SIGINT, 128 + signal.SIGTERM, 128 + signal.SIGHUP}
    assert {str(n) for n in constants | signals | {0}} <= listed
    # run --help's own list ("  124       the command timed out", "  143, 129  stopped ...")
    in_help = {
        status
        for statuses in re.findall(r"^  (\S+(?:, \S+)*)  ", _run.EPILOG, re.M)
        for status in statuses.split(", ")
    }
    assert len(in_help) >= 7 and in_help <= listed, in_help - listed


def test_every_environment_variable_the_package_reads_is_documented() -> None:
    page = (DOCS / "reference" / "environment.md").read_text()
    read = {
        name
        for path in PACKAGE.rglob("*.py")
        for name in re.findall(r"[\"'](CREATEOS_[A-Z_]+)[\"']", path.read_text())
    }
    assert len(read) >= 8
    assert {name for name in read if f"`{name}`" not in page} == set()


# --- navigation ----------------------------------------------------------------------------


def test_every_how_to_guide_is_one_click_from_the_navigation() -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.SafeLoader)
    sections = {
        next(iter(item)): item[next(iter(item))] for item in config["nav"] if isinstance(item, dict)
    }
    guides = [e for e in sections["How-to guides"] if isinstance(e, dict)]
    files = {next(iter(e.values())) for e in guides}
    assert files == {p.relative_to(DOCS).as_posix() for p in (DOCS / "how-to").glob("*.md")} - {
        "how-to/index.md"
    }
    titles = " ".join(next(iter(e)) for e in guides).lower()
    for task in ("commands", "files", "background", "previews", "forks", "disks", "computer use",
                 "notebooks", "ci", "cs.map", "inspect", "emulator", "errors"):  # fmt: skip
        assert task in titles, task


def test_the_internal_notes_stayed_out() -> None:
    for path in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        text = path.read_text()
        assert "Protocol notes" not in text and "Request budget table line" not in text, path
