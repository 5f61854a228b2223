"""The Python blocks of the documentation (``docs/**/*.md`` and the README), as the docs
tests run them.

A block is a fenced ```` ```python ```` block. An HTML comment on the line just before
it says how it is tested (none: it runs on the emulator):

- ``<!-- docs-test: service -->``: it needs the real CreateOS service (an account, a
  bucket); it is compiled, not run.
- ``<!-- docs-test: needs NAME -->``: it needs a module or an executable that the test
  extra does not install (a framework, a desktop); it runs where NAME is found, and is
  compiled elsewhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

_BLOCK = re.compile(
    r"(?:^<!-- docs-test: (?P<marker>[^>]*?) -->\n)?^```python[^\n]*\n(?P<code>.*?)^```$",
    re.M | re.S,
)
MARKERS = ("service", "needs")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository: docs/..., README.md
    line: int  # of the opening fence, 1-based
    code: str
    marker: str | None  # "service", "needs NAME", or None (runs)

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def blocks_of(text: str, page: str) -> list[Block]:
    found = []
    for match in _BLOCK.finditer(text):
        line = text.count("\n", 0, match.start()) + 1 + (match.group("marker") is not None)
        found.append(Block(page, line, match.group("code"), match.group("marker")))
    return found


def all_blocks() -> dict[str, list[Block]]:
    """Every page's Python blocks, in page order (pages without any left out)."""
    found = {}
    for path in pages():
        page = path.relative_to(ROOT).as_posix()
        blocks = blocks_of(path.read_text(), page)
        if blocks:
            found[page] = blocks
    return found
