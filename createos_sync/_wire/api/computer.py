"""Computer use: a desktop sandbox's screens, mouse, keyboard, clipboard and windows.

Every path is under ``/sandboxes/{id}/computer`` and takes the screen as the
``screen_id`` query parameter (absent: the service's default, screen-0),
except the ``/screens`` endpoints, which name it in the path. Reads (GET),
the clipboard's PUT and a window's DELETE are repeated after a lost answer;
every POST is an input or a creation (a click sent twice is a double
click), so it is repeated only when the service said it did not process it.
The screenshot's answer is the PNG itself, not a JSON envelope.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from ...errors import Operation, ProtocolError
from ..deadline import Deadline
from ..http import Transport
from ..retry import Repeat
from .common import _items, _object, _sandbox

OP = Operation.COMPUTER
SCREENSHOT_LIMIT = 64 << 20  # bytes: a 8K screen's PNG fits many times over


def _computer(sandbox_id: str, suffix: str) -> str:
    return f"{_sandbox(sandbox_id)}/computer{suffix}"


def _window(sandbox_id: str, window_id: str, suffix: str = "") -> str:
    return _computer(sandbox_id, f"/windows/{quote(window_id, safe='')}{suffix}")


def _screen_path(sandbox_id: str, screen_id: str, suffix: str = "") -> str:
    return _computer(sandbox_id, f"/screens/{quote(screen_id, safe='')}{suffix}")


def _params(screen: str | None) -> dict[str, str] | None:
    return None if screen is None else {"screen_id": screen}


def _get(t: Transport, path: str, screen: str | None, deadline: Deadline, **query: str) -> Any:
    params = {**(_params(screen) or {}), **query}
    reply = t.call(
        "GET", path, operation=OP, repeat=Repeat.SAFE, deadline=deadline, params=params or None
    )
    return reply.data


def _post(
    t: Transport, path: str, body: dict[str, Any] | None, screen: str | None, deadline: Deadline
) -> Any:
    reply = t.call(
        "POST",
        path,
        operation=OP,
        repeat=Repeat.REFUSED_ONLY,
        deadline=deadline,
        params=_params(screen),
        json_body=body,
    )
    return reply.data


# The whole screen


def screenshot(
    t: Transport,
    sandbox_id: str,
    screen: str | None,
    deadline: Deadline,
    *,
    window_id: str | None = None,
    region: tuple[int, int, int, int] | None = None,
) -> bytes:
    """The PNG bytes of the screen, of one window, or of a region ``(x, y, width, height)``."""
    params = _params(screen) or {}
    if window_id is not None:
        params["window_id"] = window_id
    if region is not None:
        params.update(zip(("x", "y", "width", "height"), map(str, region), strict=True))
    stream = t.stream(
        "GET",
        _computer(sandbox_id, "/screenshot"),
        operation=OP,
        repeat=Repeat.SAFE,
        deadline=deadline,
        params=params or None,
    )
    with stream:
        chunks, size = [], 0
        for chunk in stream.chunks():
            size += len(chunk)
            if size > SCREENSHOT_LIMIT:
                raise ProtocolError(f"the answer to {OP} is larger than any screenshot")
            chunks.append(chunk)
    return b"".join(chunks)


def screen_size(t: Transport, sandbox_id: str, screen: str | None, deadline: Deadline) -> Any:
    return _object(_get(t, _computer(sandbox_id, "/screen"), screen, deadline), OP)


def cursor(t: Transport, sandbox_id: str, screen: str | None, deadline: Deadline) -> Any:
    return _object(_get(t, _computer(sandbox_id, "/cursor"), screen, deadline), OP)


def get_clipboard(t: Transport, sandbox_id: str, screen: str | None, deadline: Deadline) -> Any:
    return _object(_get(t, _computer(sandbox_id, "/clipboard"), screen, deadline), OP)


def set_clipboard(
    t: Transport, sandbox_id: str, text: str, screen: str | None, deadline: Deadline
) -> None:
    t.call(
        "PUT",
        _computer(sandbox_id, "/clipboard"),
        operation=OP,
        repeat=Repeat.SAFE,  # it replaces the clipboard whole: a repeat changes nothing
        deadline=deadline,
        params=_params(screen),
        json_body={"text": text},
    )


def launch(
    t: Transport,
    sandbox_id: str,
    application: str,
    uri: str | None,
    screen: str | None,
    deadline: Deadline,
) -> None:
    body = {"application": application, **({"uri": uri} if uri else {})}
    _post(t, _computer(sandbox_id, "/launch"), body, screen, deadline)


def open_target(
    t: Transport, sandbox_id: str, target: str, screen: str | None, deadline: Deadline
) -> None:
    _post(t, _computer(sandbox_id, "/open"), {"target": target}, screen, deadline)


# Mouse and keyboard: one POST each, ``verb`` naming the endpoint (``mouse/click``...)


def mouse(
    t: Transport,
    sandbox_id: str,
    verb: str,
    body: dict[str, Any],
    screen: str | None,
    deadline: Deadline,
) -> None:
    """``verb`` is one of move, click, scroll, drag, down, up."""
    _post(t, _computer(sandbox_id, f"/mouse/{verb}"), body, screen, deadline)


def keyboard(
    t: Transport,
    sandbox_id: str,
    verb: str,
    body: dict[str, Any],
    screen: str | None,
    deadline: Deadline,
) -> None:
    """``verb`` is one of type, press, down, up."""
    _post(t, _computer(sandbox_id, f"/keyboard/{verb}"), body, screen, deadline)


# Windows


def list_windows(
    t: Transport,
    sandbox_id: str,
    application: str | None,
    screen: str | None,
    deadline: Deadline,
) -> list[Any]:
    query = {} if application is None else {"application": application}
    data = _get(t, _computer(sandbox_id, "/windows"), screen, deadline, **query)
    return _items(data, OP)[0]


def current_window(t: Transport, sandbox_id: str, screen: str | None, deadline: Deadline) -> Any:
    return _object(_get(t, _computer(sandbox_id, "/windows/current"), screen, deadline), OP)


def window_geometry(
    t: Transport, sandbox_id: str, window_id: str, screen: str | None, deadline: Deadline
) -> Any:
    return _object(_get(t, _window(sandbox_id, window_id, "/geometry"), screen, deadline), OP)


def window_action(
    t: Transport,
    sandbox_id: str,
    window_id: str,
    action: str,
    body: dict[str, Any] | None,
    screen: str | None,
    deadline: Deadline,
) -> None:
    """``action`` is one of focus, move, resize, maximize, minimize, restore."""
    _post(t, _window(sandbox_id, window_id, f"/{action}"), body, screen, deadline)


def close_window(
    t: Transport, sandbox_id: str, window_id: str, screen: str | None, deadline: Deadline
) -> None:
    t.call(
        "DELETE",
        _window(sandbox_id, window_id),
        operation=OP,
        repeat=Repeat.SAFE,
        deadline=deadline,
        params=_params(screen),
    )


# Screens


def list_screens(t: Transport, sandbox_id: str, deadline: Deadline) -> list[Any]:
    return _items(_get(t, _computer(sandbox_id, "/screens"), None, deadline), OP)[0]


def create_screen(
    t: Transport, sandbox_id: str, size: dict[str, int], deadline: Deadline
) -> dict[str, Any]:
    return _object(_post(t, _computer(sandbox_id, "/screens"), size, None, deadline), OP)


def resize_screen(
    t: Transport, sandbox_id: str, screen_id: str, size: dict[str, int], deadline: Deadline
) -> dict[str, Any]:
    path = _screen_path(sandbox_id, screen_id, "/resize")
    return _object(_post(t, path, size, None, deadline), OP)


def delete_screen(t: Transport, sandbox_id: str, screen_id: str, deadline: Deadline) -> None:
    t.call(
        "DELETE",
        _screen_path(sandbox_id, screen_id),
        operation=OP,
        repeat=Repeat.SAFE,
        deadline=deadline,
    )
