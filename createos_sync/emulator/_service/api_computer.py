"""Endpoints for computer use: a ``desktop:1`` sandbox's screens, input, clipboard, windows.

Paths and bodies are the official client's (``createos/services.py``). Each
request is checked here, then handed to the sandbox's desktop
(``_state/desktops``) as one agent operation. The screenshot is answered as
the PNG itself (``image/png``), as the official client reads it; actions
answer an empty object.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from typing import Any

from werkzeug.wrappers import Request, Response

from .._machine.desktop import typing_pace
from .._state.desktops import Desktops
from .._wire import ApiError, integer, json_body, query_int, success, text, text_list

SB = "/v1/sandboxes/<sandbox_id>/computer"
WIN = f"{SB}/windows/<window_id>"
SCR = f"{SB}/screens/<screen_id>"
MOUSE = "move|click|scroll|drag|down|up"
KEYBOARD = "type|press|down|up"
WINDOW_ACTIONS = "focus|move|resize|maximize|minimize|restore"
ROUTES = (
    (f"{SB}/screenshot", "GET", "computer.screenshot"),
    (f"{SB}/screen", "GET", "computer.screen"),
    (f"{SB}/cursor", "GET", "computer.cursor"),
    (f"{SB}/clipboard", "GET", "computer.clipboard_get"),
    (f"{SB}/clipboard", "PUT", "computer.clipboard_set"),
    (f"{SB}/open", "POST", "computer.open"),
    (f"{SB}/launch", "POST", "computer.launch"),
    (f"{SB}/mouse/<any({MOUSE.replace('|', ',')}):verb>", "POST", "computer.mouse"),
    (f"{SB}/keyboard/<any({KEYBOARD.replace('|', ',')}):verb>", "POST", "computer.keyboard"),
    (f"{SB}/windows", "GET", "computer.windows"),
    (f"{SB}/windows/current", "GET", "computer.window_current"),
    (WIN, "GET", "computer.window_get"),
    (WIN, "DELETE", "computer.window_close"),
    (f"{WIN}/geometry", "GET", "computer.window_geometry"),
    (f"{WIN}/<any({WINDOW_ACTIONS.replace('|', ',')}):action>", "POST", "computer.window_action"),
    (f"{SB}/screens", "GET", "computer.screens"),
    (f"{SB}/screens", "POST", "computer.screen_create"),
    (SCR, "GET", "computer.screen_get"),
    (SCR, "DELETE", "computer.screen_delete"),
    (f"{SCR}/resize", "POST", "computer.screen_resize"),
    (f"{SCR}/connect", "GET", "computer.screen_connect"),
)
SCREEN_ID = re.compile(r"screen-[0-7]\Z")
WINDOW_ID = re.compile(r"[0-9]{1,12}\Z")
MAX_COORDINATE = 32767
MAX_SIDE = 8192
MAX_REPEAT = 100
MAX_TEXT = 100_000
ANSWER_SPARE = 10.0  # seconds an answer may take beyond the agent's own limit for its tool
BUTTONS = ("left", "middle", "right")
KEY = re.compile(r"[A-Za-z0-9_+-]{1,64}\Z")
APPLICATION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}\Z")

Handler = Callable[..., Response]


class ComputerApi:
    def __init__(self, desktops: Desktops) -> None:
        self._desktops = desktops

    def handlers(self) -> dict[str, Handler]:
        """The handler of each operation of ``ROUTES``."""
        return {op: getattr(self, op.removeprefix("computer.")) for _, _, op in ROUTES}

    def _ask(
        self, request: Request, sandbox_id: str, op: str, answer_s: float | None = None,
        **fields: Any,
    ) -> Any:  # fmt: skip
        screen = request.args.get("screen_id") or "screen-0"
        if not SCREEN_ID.match(screen):
            raise ApiError(400, "screen_id must be one of screen-0 .. screen-7")
        asked = {"op": op, "screen": screen, **fields}
        if answer_s is None:
            return self._desktops.ask(sandbox_id, asked)
        return self._desktops.ask(sandbox_id, asked, timeout=answer_s)

    def _done(self, request: Request, sandbox_id: str, op: str, **fields: Any) -> Response:
        self._ask(request, sandbox_id, op, **fields)
        return success({})

    # -- the screen -------------------------------------------------------

    def screenshot(self, request: Request, sandbox_id: str) -> Response:
        fields: dict[str, Any] = {}
        window = request.args.get("window_id")
        if window:
            fields["window_id"] = _window(window)
        for key in ("x", "y"):
            fields[key] = query_int(request, key, 0, MAX_COORDINATE, 0)
        for key in ("width", "height"):
            fields[key] = query_int(request, key, 0, MAX_SIDE, 0)
        data = self._ask(request, sandbox_id, "screenshot", **fields)
        try:
            png = base64.b64decode(data["png"], validate=True)
        except (KeyError, TypeError, binascii.Error):
            raise ApiError(500, "the desktop answered no image") from None
        return Response(png, mimetype="image/png")

    def screen(self, request: Request, sandbox_id: str) -> Response:
        return success(self._ask(request, sandbox_id, "screen"))

    def cursor(self, request: Request, sandbox_id: str) -> Response:
        return success(self._ask(request, sandbox_id, "cursor"))

    def clipboard_get(self, request: Request, sandbox_id: str) -> Response:
        return success(self._ask(request, sandbox_id, "clipboard.get"))

    def clipboard_set(self, request: Request, sandbox_id: str) -> Response:
        value = _text(json_body(request), "text")
        return self._done(request, sandbox_id, "clipboard.set", text=value)

    def open(self, request: Request, sandbox_id: str) -> Response:
        target = _line(json_body(request), "target")
        return self._done(request, sandbox_id, "open", target=target)

    def launch(self, request: Request, sandbox_id: str) -> Response:
        body = json_body(request)
        application = text(body, "application")
        if not APPLICATION.match(application):
            raise ApiError(400, "application must be the name of an installed application")
        uri = _line(body, "uri") if body.get("uri") else None
        return self._done(request, sandbox_id, "launch", application=application, uri=uri)

    # -- input ------------------------------------------------------------

    def mouse(self, request: Request, sandbox_id: str, verb: str) -> Response:
        body = json_body(request, optional=True)
        fields: dict[str, Any] = {}
        if verb == "move":
            fields.update(_point(body))
        elif verb == "click":
            if body.get("x") is not None or body.get("y") is not None:
                fields.update(_point(body))
            fields["button"] = _button(body)
            fields["count"] = integer(body, "count", 0, MAX_REPEAT, 0)
        elif verb == "scroll":
            direction = body.get("direction") or "down"
            if direction not in ("up", "down"):
                raise ApiError(400, "direction must be up or down")
            fields["direction"] = direction
            fields["amount"] = integer(body, "amount", 0, MAX_REPEAT, 0)
        elif verb == "drag":
            fields["from"] = _point(_object(body, "from"))
            fields["to"] = _point(_object(body, "to"))
        else:
            fields["button"] = _button(body)
        return self._done(request, sandbox_id, f"mouse.{verb}", **fields)

    def keyboard(self, request: Request, sandbox_id: str, verb: str) -> Response:
        body = json_body(request)
        if verb == "type":
            asked = integer(body, "delay_in_ms", 0, 1000, 0) or 0
            value = _text(body, "text")
            delay, seconds = typing_pace(len(value), asked)  # a 400 before anything is typed
            return self._done(
                request, sandbox_id, "keyboard.type", answer_s=seconds + ANSWER_SPARE,
                text=value, delay_in_ms=delay, seconds=seconds,
            )  # fmt: skip
        keys = text_list(body, "keys")
        if not keys or not all(KEY.match(k) for k in keys):
            raise ApiError(400, "keys must be key names such as ctrl, c or Return")
        return self._done(request, sandbox_id, f"keyboard.{verb}", keys=keys)

    # -- windows ----------------------------------------------------------

    def windows(self, request: Request, sandbox_id: str) -> Response:
        application = request.args.get("application") or None
        if application is not None and not APPLICATION.match(application):
            raise ApiError(400, "application must be the name of an application")
        return success(self._ask(request, sandbox_id, "windows.list", application=application))

    def window_current(self, request: Request, sandbox_id: str) -> Response:
        return success(self._ask(request, sandbox_id, "windows.current"))

    def window_get(self, request: Request, sandbox_id: str, window_id: str) -> Response:
        return success(self._ask(request, sandbox_id, "windows.get", window=_window(window_id)))

    def window_geometry(self, request: Request, sandbox_id: str, window_id: str) -> Response:
        window = _window(window_id)
        return success(self._ask(request, sandbox_id, "windows.geometry", window=window))

    def window_close(self, request: Request, sandbox_id: str, window_id: str) -> Response:
        return self._done(request, sandbox_id, "windows.close", window=_window(window_id))

    def window_action(
        self, request: Request, sandbox_id: str, window_id: str, action: str
    ) -> Response:
        body = json_body(request, optional=True)
        fields: dict[str, Any] = {"window": _window(window_id)}
        if action == "move":
            fields.update(_point(body))
        elif action == "resize":
            fields.update(_size(body, required=True))
        return self._done(request, sandbox_id, f"windows.{action}", **fields)

    # -- screens ----------------------------------------------------------

    def screens(self, request: Request, sandbox_id: str) -> Response:
        return success(self._desktops.ask(sandbox_id, {"op": "screens.list"}))

    def screen_create(self, request: Request, sandbox_id: str) -> Response:
        size = _size(json_body(request, optional=True), required=False)
        return success(self._desktops.ask(sandbox_id, {"op": "screens.create", **size}))

    def screen_get(self, request: Request, sandbox_id: str, screen_id: str) -> Response:
        return success(self._screen_op(sandbox_id, screen_id, "screens.get"))

    def screen_resize(self, request: Request, sandbox_id: str, screen_id: str) -> Response:
        size = _size(json_body(request, optional=True), required=False)
        return success(self._screen_op(sandbox_id, screen_id, "screens.resize", **size))

    def screen_delete(self, request: Request, sandbox_id: str, screen_id: str) -> Response:
        self._screen_op(sandbox_id, screen_id, "screens.delete")
        return success({})

    def screen_connect(self, request: Request, sandbox_id: str, screen_id: str) -> Response:
        self._screen_op(sandbox_id, screen_id, "screens.get")
        raise ApiError(501, "the emulator serves no VNC connection to a screen")

    def _screen_op(self, sandbox_id: str, screen_id: str, op: str, **fields: Any) -> Any:
        if not SCREEN_ID.match(screen_id):
            raise ApiError(404, "screen not found")
        return self._desktops.ask(sandbox_id, {"op": op, "screen": screen_id, **fields})


def _object(body: dict[str, Any], key: str) -> dict[str, Any]:
    value = body.get(key)
    if not isinstance(value, dict):
        raise ApiError(400, f"{key} must be an object with x and y")
    return value


def _point(body: dict[str, Any]) -> dict[str, int | None]:
    return {k: integer(body, k, 0, MAX_COORDINATE, 0) for k in ("x", "y")}


def _size(body: dict[str, Any], *, required: bool) -> dict[str, int]:
    """``width`` and ``height`` as given (0 or absent: the desktop's choice, unless required)."""
    size = {}
    for key in ("width", "height"):
        value = integer(body, key, 0, MAX_SIDE, 0)
        if value:
            size[key] = value
        elif required:
            raise ApiError(400, f"{key} must be an integer in 1..{MAX_SIDE}")
    return size


def _button(body: dict[str, Any]) -> str:
    value = body.get("button") or "left"
    if value not in BUTTONS:
        raise ApiError(400, "button must be left, middle or right")
    return str(value)


def _text(body: dict[str, Any], key: str) -> str:
    value = text(body, key)
    if len(value) > MAX_TEXT:
        raise ApiError(400, f"{key} is longer than {MAX_TEXT} characters")
    return value


def _line(body: dict[str, Any], key: str) -> str:
    value = text(body, key)
    if not value.strip() or len(value) > 2048 or any(ord(c) < 32 for c in value):
        raise ApiError(400, f"{key} must be one line of text")
    return value


def _window(value: str) -> str:
    if not WINDOW_ID.match(value):
        raise ApiError(404, "window not found")
    return value
