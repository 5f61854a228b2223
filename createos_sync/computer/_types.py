"""What computer use answers with: screenshots, windows, window geometry, screens.

All of it is built from the service's answer and checked first: a PNG must
be a PNG (its size is read from its header, never trusted from elsewhere),
ids must look like ids before they go into a path, and a window title is
server text shown to a user, so it is made printable and bounded.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path
from typing import Any

import attrs

from .._wire.server_text import ID, UNRECOGNISED
from ..errors import Operation, ProtocolError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SCREEN_ID = re.compile(r"screen-[0-7]\Z")
DISPLAY = re.compile(r"[A-Za-z0-9._-]{0,64}:[0-9]{1,5}(?:\.[0-9]{1,3})?\Z")
TITLE_LIMIT = 200
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def _bad(what: str) -> ProtocolError:
    return ProtocolError(f"the {what} in the answer to {Operation.COMPUTER} is not plausible")


def _number(data: dict[str, Any], key: str, what: str, *, low: int) -> int:
    """A whole number of pixels in ``low``..2**20 (a coordinate may be negative)."""
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 1 << 20:
        raise _bad(f"{what} {key}")
    return value


def _title(value: object) -> str:
    if not isinstance(value, str):
        return ""
    text = _CONTROLS.sub(" ", value).strip()
    return text if len(text) <= TITLE_LIMIT else text[: TITLE_LIMIT - 1] + "\u2026"


@attrs.frozen(repr=False)
class Screenshot:
    """A PNG image of a screen (``png``), shown inline by Jupyter; ``save(path)`` writes it."""

    png: bytes
    width: int
    height: int

    @property
    def size(self) -> tuple[int, int]:
        """``(width, height)`` in pixels."""
        return self.width, self.height

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the PNG to ``path`` (replacing a file there); returns the path."""
        target = Path(path)
        target.write_bytes(self.png)
        return target

    def _repr_png_(self) -> bytes:
        return self.png

    def __repr__(self) -> str:
        return f"<Screenshot {self.width}x{self.height} png={len(self.png)} bytes>"


@attrs.frozen
class Window:
    """A desktop window: its id (for the window methods) and its title."""

    id: str
    title: str


@attrs.frozen
class WindowGeometry:
    """Where a window's content is, in screen pixels (inside the window manager's frame)."""

    x: int
    y: int
    width: int
    height: int


@attrs.frozen
class Screen:
    """One of a desktop's screens: ``id`` (``screen-0``...), its X ``display`` and size."""

    id: str
    display: str
    width: int
    height: int


# -- from the service's answers ------------------------------------------------


def screenshot_of(data: bytes) -> Screenshot:
    """Check that ``data`` is a PNG and read its size from its header."""
    if len(data) < 33 or not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR":
        raise ProtocolError(f"the answer to {Operation.COMPUTER} is not a PNG image")
    width, height = struct.unpack(">II", data[16:24])
    if not (0 < width <= 1 << 16 and 0 < height <= 1 << 16):
        raise _bad("image size")
    return Screenshot(data, width, height)


def window_of(data: object) -> Window:
    if not isinstance(data, dict):
        raise _bad("window")
    window_id = data.get("id")
    if not isinstance(window_id, str) or not ID.match(window_id):
        raise _bad("window id")
    return Window(window_id, _title(data.get("title")))


def geometry_of(data: dict[str, Any]) -> WindowGeometry:
    x, y = point_of(data, "window")
    width, height = (_number(data, key, "window", low=0) for key in ("width", "height"))
    return WindowGeometry(x, y, width, height)


def screen_of(data: object) -> Screen:
    if not isinstance(data, dict):
        raise _bad("screen")
    screen_id = data.get("screen_id")
    if not isinstance(screen_id, str) or not SCREEN_ID.match(screen_id):
        raise _bad("screen id")
    display = data.get("display")
    shown = display if isinstance(display, str) and DISPLAY.match(display) else UNRECOGNISED
    size = size_of(data, "screen")
    return Screen(screen_id, shown, *size)


def size_of(data: dict[str, Any], what: str = "screen") -> tuple[int, int]:
    """``(width, height)``, each at least 1."""
    return _number(data, "width", what, low=1), _number(data, "height", what, low=1)


def point_of(data: dict[str, Any], what: str) -> tuple[int, int]:
    """``(x, y)`` of the pointer."""
    return _number(data, "x", what, low=-(1 << 20)), _number(data, "y", what, low=-(1 << 20))
