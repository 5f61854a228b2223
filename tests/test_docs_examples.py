"""Every Python block of the documentation runs, on one local emulator.

The blocks of a page run in order in one namespace, as a reader types them into one
interpreter: a tutorial's later steps use what its earlier ones made. The namespace
starts with ``cs`` (the package) and ``box``, an open lease, since the how-to pages
show one task each on "an open lease ``box``". ``CREATEOS_API_URL`` and
``CREATEOS_API_KEY`` point at the emulator, so ``cs.lease()`` and ``cs.Client()``
use it as they would after ``eval "$(createos-sync emulator --env)"``. After each page
every lease is closed and no sandbox may be left. Blocks marked as needing the real
service are compiled (see ``tests/docs_blocks.py`` for the markers).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import createos_sync as cs
from createos_sync.emulator import Emulator

from .docs_blocks import MARKERS, ROOT, Block, all_blocks, blocks_of, pages

BLOCKS = all_blocks()


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(rate_limit=None) as emu:
        yield emu


def _available(name: str) -> bool:
    if shutil.which(name):
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _runs(block: Block) -> bool:
    if block.marker is None:
        return True
    if block.marker.startswith("needs "):
        return all(_available(name) for name in block.marker.split()[1:])
    return False


def _uses_a_given_box(blocks: list[Block]) -> bool:
    """Whether the page uses ``box`` without making one itself (opening one costs time)."""
    code = "\n".join(block.code for block in blocks)
    return bool(re.search(r"\bbox\b", code)) and not re.search(r"\bbox =|\bas box\b", code)


@pytest.mark.parametrize("page", sorted(BLOCKS))
def test_the_pages_python_blocks_run_on_the_emulator(
    page: str, emulator: Emulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CREATEOS_API_URL", emulator.url)
    monkeypatch.setenv("CREATEOS_API_KEY", emulator.api_key)
    monkeypatch.chdir(tmp_path)  # a block that writes a local file writes it here
    for block in BLOCKS[page]:  # compiled first: a syntax error anywhere fails the page
        compile(block.code, block.name, "exec")
    namespace: dict[str, object] = {"__name__": "__docs__", "cs": cs}
    try:
        if _uses_a_given_box(BLOCKS[page]):
            namespace["box"] = cs.lease().open()
        for block in BLOCKS[page]:
            if _runs(block):
                exec(compile(block.code, block.name, "exec"), namespace)
    finally:
        cs.close_all()
    assert emulator.live_sandboxes() == [], "a block left a sandbox behind"


def test_every_python_block_is_found_and_every_marker_is_known() -> None:
    for path in pages():
        text = path.read_text()
        page = path.relative_to(ROOT).as_posix()
        found = blocks_of(text, page)
        # an indented block (in a list or an admonition) would escape the collector
        assert len(found) == len(re.findall(r"```python", text)), page
        for block in found:
            assert block.marker is None or block.marker.split()[0] in MARKERS, block.name
            if block.marker and block.marker.startswith("needs"):
                assert len(block.marker.split()) > 1, f"{block.name}: needs what?"
    marked = [b for blocks in BLOCKS.values() for b in blocks if b.marker]
    everything = [b for blocks in BLOCKS.values() for b in blocks]
    assert len(marked) * 4 < len(everything), "most blocks must run"


def test_the_collector_sees_markers_and_lines() -> None:
    text = "intro\n\n<!-- docs-test: service -->\n```python\nx = 1\n```\n\n```python\ny = 2\n```\n"
    first, second = blocks_of(text, "docs/page.md")
    assert first.name == "docs/page.md:4"
    assert (first.line, first.marker, first.code) == (4, "service", "x = 1\n")
    assert (second.line, second.marker, second.code) == (8, None, "y = 2\n")
    assert not _runs(first) and _runs(second)
