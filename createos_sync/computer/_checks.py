"""Arguments of computer use, checked before any request is sent."""

from __future__ import annotations

import re

from .._wire.server_text import ID, no_surrogates
from ._types import SCREEN_ID, Screen, Window

MAX_COORDINATE = 32767  # X11 coordinates are signed 16-bit
MAX_SIDE = 16384
MAX_TEXT = 100_000
MAX_REPEAT = 100
BUTTONS = ("left", "middle", "right")
KEY = re.compile(r"[^\s\x00-\x1f\x7f]{1,64}\Z")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def coordinate(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int (pixels)")
    if not 0 <= value <= MAX_COORDINATE:
        raise ValueError(f"{name} must be in 0..{MAX_COORDINATE}, not {value}")
    return value


def side(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int (pixels)")
    if not 1 <= value <= MAX_SIDE:
        raise ValueError(f"{name} must be in 1..{MAX_SIDE}, not {value}")
    return value


def button(value: object) -> str:
    if value not in BUTTONS:
        raise ValueError(f"button must be one of {', '.join(BUTTONS)}")
    assert isinstance(value, str)
    return value


def clicks(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int")
    if not -MAX_REPEAT <= value <= MAX_REPEAT:
        raise ValueError(f"{name} must be in -{MAX_REPEAT}..{MAX_REPEAT}, not {value}")
    return value


def text(name: str, value: object, *, limit: int = MAX_TEXT) -> str:
    """Text to type or to put on the clipboard: any characters but NUL, bounded."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str")
    if "\x00" in value:
        raise ValueError(f"{name} must not contain NUL characters")
    if len(value) > limit:
        raise ValueError(f"{name} is longer than {limit} characters")
    return no_surrogates(name, value)


def single_line(name: str, value: object, *, limit: int = 2048) -> str:
    """An application name, URI or target: non-empty, no control characters."""
    checked = text(name, value, limit=limit)
    if not checked.strip() or _CONTROL.search(checked) or "\n" in checked:
        raise ValueError(f"{name} must be a non-empty line without control characters")
    return checked


def keys(values: tuple[object, ...]) -> list[str]:
    """Key names (``"ctrl"``, ``"c"``, ``"Return"``): at least one, no spaces or controls."""
    if not values:
        raise ValueError("give at least one key")
    checked = []
    for key in values:
        if not isinstance(key, str):
            raise TypeError("each key must be a str such as 'ctrl', 'c' or 'Return'")
        if not KEY.match(key):
            raise ValueError("a key name must be 1..64 characters without spaces or controls")
        checked.append(key)
    return checked


def window_id(value: object) -> str:
    """A ``Window`` (from ``windows()``) or its id."""
    if isinstance(value, Window):
        return value.id
    if not isinstance(value, str):
        raise TypeError("window must be a Window (from windows()) or its id")
    if not ID.match(value):
        raise ValueError("window is not a plausible window id")
    return value


def screen_id(value: object) -> str:
    """A ``Screen`` (from ``screens()``) or its id, ``screen-0`` .. ``screen-7``."""
    if isinstance(value, Screen):
        return value.id
    if not isinstance(value, str):
        raise TypeError("screen must be a Screen (from screens()) or its id such as 'screen-1'")
    if not SCREEN_ID.match(value):
        raise ValueError("screen must be one of screen-0 .. screen-7")
    return value


def region(value: object) -> tuple[int, int, int, int]:
    """``(x, y, width, height)`` of a screenshot."""
    if not isinstance(value, tuple) or len(value) != 4:
        raise TypeError("region must be a tuple (x, y, width, height)")
    x, y, width, height = value
    return (coordinate("x", x), coordinate("y", y), side("width", width), side("height", height))
