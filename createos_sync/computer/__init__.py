"""Computer use: the screen, mouse, keyboard, clipboard and windows of a desktop sandbox.

``box.computer`` (a sandbox of a desktop image such as ``desktop:1``) is a
``Computer``. Why it works the way it does:

- Every method is one request (``scroll`` is two: the wire's scroll has no
  position, so the pointer moves there first), and every argument is
  checked before it is sent: coordinates are whole pixels in 0..32767,
  buttons are ``left``/``middle``/``right``, key names have no spaces.
- Input is never repeated after an unknown outcome: a click or a keystroke
  sent twice is a different input. Reads, the clipboard's replacement and
  closing a window are repeated like any idempotent request.
- What the service answers is checked before it is used or shown: a
  screenshot must be a PNG, ids must look like ids, titles are made printable.
- Typed text and clipboard contents may be secrets: they are never in a
  repr, a log line or an error message (the transport removes every value a
  request sent from the service's messages).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._sandboxes.box import Box
from .._wire.api import computer as api
from .._wire.deadline import Deadline
from ..errors import Operation, ProtocolError
from . import _checks as check
from ._types import (
    Screen,
    Screenshot,
    Window,
    WindowGeometry,
    geometry_of,
    point_of,
    screen_of,
    screenshot_of,
    size_of,
    window_of,
)

__all__ = ["Computer", "Screen", "Screenshot", "Window", "WindowGeometry"]

WindowRef = Window | str
ScreenRef = Screen | str


class Computer:
    """The desktop of one sandbox, on one of its screens (``screen-0`` unless ``on()``)."""

    _box: Callable[[], Box]  # the lease's usable box: it checks the lease is open
    _deadline: Callable[[], Deadline]
    _screen: str | None

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError(
            "Computer has no public constructor: Lease.computer is the desktop of a lease's sandbox"
        )

    @classmethod
    def _create(
        cls, box: Callable[[], Box], deadline: Callable[[], Deadline], screen: str | None = None
    ) -> Computer:
        """The desktop of the sandbox ``box()`` gives, with ``deadline()`` for each
        request; no request."""
        computer = cls.__new__(cls)
        computer._box, computer._deadline, computer._screen = box, deadline, screen
        return computer

    def __repr__(self) -> str:
        return f"<Computer screen={self._screen or 'screen-0'}>"

    def on(self, screen: ScreenRef) -> Computer:
        """The same desktop on another ``screen`` (see ``screens()``); no request."""
        return Computer._create(self._box, self._deadline, check.screen_id(screen))

    # -- seeing -----------------------------------------------------------

    def screenshot(
        self, *, window: WindowRef | None = None, region: tuple[int, int, int, int] | None = None
    ) -> Screenshot:
        """A PNG of the screen, of one ``window``, or of ``region`` ``(x, y, width, height)``.

        In Jupyter a ``Screenshot`` shows itself inline; ``.save(path)`` writes it.

        Request budget: 1 GET (repeated after a lost answer).

        Raises:
            TypeError, ValueError: both ``window`` and ``region``, or an invalid one
                (before any request).
            ProtocolError: the answer is not a PNG image.
        """
        if window is not None and region is not None:
            raise ValueError("give window or region, not both")
        window_id = None if window is None else check.window_id(window)
        area = None if region is None else check.region(region)
        box = self._box()
        png = api.screenshot(
            box.transport,
            box.sandbox_id,
            self._screen,
            self._deadline(),
            window_id=window_id,
            region=area,
        )
        return screenshot_of(png)

    def screen(self) -> tuple[int, int]:
        """``(width, height)`` of the screen in pixels. Request budget: 1 GET."""
        box = self._box()
        data = api.screen_size(box.transport, box.sandbox_id, self._screen, self._deadline())
        return size_of(data)

    def cursor(self) -> tuple[int, int]:
        """``(x, y)`` of the mouse pointer. Request budget: 1 GET."""
        box = self._box()
        data = api.cursor(box.transport, box.sandbox_id, self._screen, self._deadline())
        return point_of(data, "cursor")

    # -- mouse ------------------------------------------------------------

    def move(self, x: int, y: int) -> None:
        """Move the pointer to ``(x, y)``. Request budget: 1 POST (not repeated after a
        lost answer, like every input)."""
        self._mouse("move", {"x": check.coordinate("x", x), "y": check.coordinate("y", y)})

    def click(self, x: int, y: int, *, button: str = "left", double: bool = False) -> None:
        """Click ``button`` at ``(x, y)`` (twice with ``double=True``). Request budget: 1 POST.

        Raises:
            TypeError, ValueError: a coordinate outside 0..32767 or an unknown button
                (before any request).
        """
        body = {
            "button": check.button(button),
            "x": check.coordinate("x", x),
            "y": check.coordinate("y", y),
        }
        if not isinstance(double, bool):
            raise TypeError("double must be True or False")
        if double:
            body["count"] = 2
        self._mouse("click", body)

    def drag(self, x1: int, y1: int, x2: int, y2: int) -> None:
        """Press the left button at ``(x1, y1)``, move to ``(x2, y2)``, release.
        Request budget: 1 POST."""
        start = {"x": check.coordinate("x1", x1), "y": check.coordinate("y1", y1)}
        end = {"x": check.coordinate("x2", x2), "y": check.coordinate("y2", y2)}
        self._mouse("drag", {"from": start, "to": end})

    def scroll(self, x: int, y: int, *, dx: int = 0, dy: int = 0) -> None:
        """Scroll the wheel ``dy`` clicks at ``(x, y)``: down when positive, up when negative.

        Request budget: 2 POSTs (the pointer moves to ``(x, y)`` first: the
        service's scroll has no position).

        Raises:
            ValueError: ``dx`` is not 0 (the service scrolls vertically only), ``dy``
                is 0 or beyond 100 clicks (before any request).
        """
        point = {"x": check.coordinate("x", x), "y": check.coordinate("y", y)}
        if check.clicks("dx", dx) != 0:
            raise ValueError("the service scrolls vertically only: dx must be 0")
        if check.clicks("dy", dy) == 0:
            raise ValueError("dy must say how many wheel clicks to scroll (down > 0, up < 0)")
        self._mouse("move", point)
        self._mouse("scroll", {"direction": "down" if dy > 0 else "up", "amount": abs(dy)})

    def mouse_down(self, button: str = "left") -> None:
        """Press ``button`` without releasing it. Request budget: 1 POST."""
        self._mouse("down", {"button": check.button(button)})

    def mouse_up(self, button: str = "left") -> None:
        """Release ``button``. Request budget: 1 POST."""
        self._mouse("up", {"button": check.button(button)})

    # -- keyboard ---------------------------------------------------------

    def type(self, text: str) -> None:
        """Type ``text`` into the focused window. Request budget: 1 POST (none for "").

        The text is never shown in an error or a log line.
        """
        if check.text("text", text):
            self._keyboard("type", {"text": text})

    def press(self, *keys: str) -> None:
        """Press a key or a combination and release it: ``press("Return")``,
        ``press("ctrl", "c")``. Request budget: 1 POST."""
        self._keyboard("press", {"keys": check.keys(keys)})

    def key_down(self, *keys: str) -> None:
        """Hold ``keys`` down. Request budget: 1 POST."""
        self._keyboard("down", {"keys": check.keys(keys)})

    def key_up(self, *keys: str) -> None:
        """Release ``keys``. Request budget: 1 POST."""
        self._keyboard("up", {"keys": check.keys(keys)})

    # -- clipboard and applications -----------------------------------------

    def clipboard(self) -> str:
        """The clipboard's text. Request budget: 1 GET."""
        box = self._box()
        data = api.get_clipboard(box.transport, box.sandbox_id, self._screen, self._deadline())
        value = data.get("text", "")
        if not isinstance(value, str):
            raise ProtocolError(f"the clipboard in the answer to {Operation.COMPUTER} is not text")
        return value

    def set_clipboard(self, text: str) -> None:
        """Replace the clipboard's text. Request budget: 1 PUT (repeated after a lost
        answer: it replaces the whole clipboard)."""
        checked = check.text("text", text)
        box = self._box()
        api.set_clipboard(box.transport, box.sandbox_id, checked, self._screen, self._deadline())

    def launch(self, cmd: str, *, uri: str | None = None) -> None:
        """Start the installed application ``cmd`` (a name such as ``"xterm"``, not a shell
        line), optionally on ``uri``. Request budget: 1 POST.

        It returns once started, before its window shows: ``windows()`` tells when.
        """
        application = check.single_line("cmd", cmd, limit=256)
        target = None if uri is None else check.single_line("uri", uri)
        box = self._box()
        deadline = self._deadline()
        api.launch(box.transport, box.sandbox_id, application, target, self._screen, deadline)

    def open(self, target: str) -> None:
        """Open ``target`` (a URL or a file) with the desktop's default application.
        Request budget: 1 POST."""
        checked = check.single_line("target", target)
        box = self._box()
        api.open_target(box.transport, box.sandbox_id, checked, self._screen, self._deadline())

    # -- windows ----------------------------------------------------------

    def windows(self, *, application: str | None = None) -> list[Window]:
        """The desktop's windows (only ``application``'s when given). Request budget: 1 GET."""
        name = None if application is None else check.single_line("application", application)
        box = self._box()
        deadline = self._deadline()
        items = api.list_windows(box.transport, box.sandbox_id, name, self._screen, deadline)
        return [window_of(item) for item in items]

    def active_window(self) -> Window:
        """The window that has the focus. Request budget: 1 GET."""
        box = self._box()
        data = api.current_window(box.transport, box.sandbox_id, self._screen, self._deadline())
        return window_of(data)

    def window_geometry(self, window: WindowRef) -> WindowGeometry:
        """Where ``window`` is and how big. Request budget: 1 GET."""
        window_id = check.window_id(window)
        box = self._box()
        deadline = self._deadline()
        data = api.window_geometry(box.transport, box.sandbox_id, window_id, self._screen, deadline)
        return geometry_of(data)

    def focus(self, window: WindowRef) -> None:
        """Raise ``window`` and give it the keyboard. Request budget: 1 POST."""
        self._window(window, "focus", None)

    def move_window(self, window: WindowRef, x: int, y: int) -> None:
        """Move ``window``'s corner to ``(x, y)``. Request budget: 1 POST."""
        body = {"x": check.coordinate("x", x), "y": check.coordinate("y", y)}
        self._window(window, "move", body)

    def resize_window(self, window: WindowRef, width: int, height: int) -> None:
        """Make ``window`` ``width`` x ``height`` pixels. Request budget: 1 POST."""
        body = {"width": check.side("width", width), "height": check.side("height", height)}
        self._window(window, "resize", body)

    def maximize(self, window: WindowRef) -> None:
        """Maximize ``window``. Request budget: 1 POST."""
        self._window(window, "maximize", None)

    def minimize(self, window: WindowRef) -> None:
        """Minimize ``window``. Request budget: 1 POST."""
        self._window(window, "minimize", None)

    def restore(self, window: WindowRef) -> None:
        """Bring ``window`` back from maximized or minimized. Request budget: 1 POST."""
        self._window(window, "restore", None)

    def close_window(self, window: WindowRef) -> None:
        """Ask ``window`` to close, as its close button would. Request budget: 1 DELETE."""
        window_id = check.window_id(window)
        box = self._box()
        api.close_window(box.transport, box.sandbox_id, window_id, self._screen, self._deadline())

    # -- screens ----------------------------------------------------------

    def screens(self) -> list[Screen]:
        """The desktop's screens. Request budget: 1 GET."""
        box = self._box()
        items = api.list_screens(box.transport, box.sandbox_id, self._deadline())
        return [screen_of(item) for item in items]

    def add_screen(self, width: int | None = None, height: int | None = None) -> Screen:
        """A new screen, ``width`` x ``height`` (the service's default size for either not
        given); ``on(screen)`` drives it.

        Request budget: 1 POST (not repeated after a lost answer: it creates).
        """
        size = _size(width, height)
        box = self._box()
        data = api.create_screen(box.transport, box.sandbox_id, size, self._deadline())
        return screen_of(data)

    def resize_screen(self, screen: ScreenRef, width: int, height: int) -> Screen:
        """Make ``screen`` ``width`` x ``height`` pixels. Request budget: 1 POST."""
        screen_id = check.screen_id(screen)
        size = {"width": check.side("width", width), "height": check.side("height", height)}
        box = self._box()
        data = api.resize_screen(box.transport, box.sandbox_id, screen_id, size, self._deadline())
        return screen_of(data)

    def remove_screen(self, screen: ScreenRef) -> None:
        """Remove a screen and what shows on it. Request budget: 1 DELETE."""
        screen_id = check.screen_id(screen)
        box = self._box()
        api.delete_screen(box.transport, box.sandbox_id, screen_id, self._deadline())

    # -- plumbing ---------------------------------------------------------

    def _mouse(self, verb: str, body: dict[str, Any]) -> None:
        box = self._box()
        api.mouse(box.transport, box.sandbox_id, verb, body, self._screen, self._deadline())

    def _keyboard(self, verb: str, body: dict[str, Any]) -> None:
        box = self._box()
        api.keyboard(box.transport, box.sandbox_id, verb, body, self._screen, self._deadline())

    def _window(self, window: WindowRef, action: str, body: dict[str, Any] | None) -> None:
        window_id = check.window_id(window)
        box = self._box()
        deadline = self._deadline()
        api.window_action(
            box.transport, box.sandbox_id, window_id, action, body, self._screen, deadline
        )


def _size(width: int | None, height: int | None) -> dict[str, int]:
    size = {}
    if width is not None:
        size["width"] = check.side("width", width)
    if height is not None:
        size["height"] = check.side("height", height)
    return size
