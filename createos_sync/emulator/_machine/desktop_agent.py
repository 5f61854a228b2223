"""The desktop of one emulated ``desktop:1`` sandbox, run INSIDE that sandbox.

Run as ``python3 -I -S -c <this source> W H`` (the standard library only), it
starts an Xvfb display per screen (its frame buffer file gives screenshots)
with openbox, then answers each JSON line on stdin with one on stdout:
``{"id", "op", "screen", ...}`` -> ``{"id", "ok": true, "data"}`` or ``{"id",
"ok": false, "status", "message"}`` (the first answer, id 0: did it start).
xdotool, wmctrl and xclip run here, in the sandbox, so whatever the sandbox
does to its display reaches only the sandbox; the clipboard's owner (xclip,
in the background) lives as long as this process.
Applications start through the launcher (``desktop_launcher``, its source
the third argument); screenshots are encoded by ``desktop_image`` (its source
the fourth), displays started by ``desktop_display`` (the fifth): ``-c`` runs one
file, so the agent's other modules come as text.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
from typing import Any

Request = dict[str, Any]
IMAGE = types.ModuleType("desktop_image")  # its source is the fourth argument
DISPLAY = types.ModuleType("desktop_display")  # its source is the fifth

DEFAULT_SIZE = (1024, 768)
START_TIMEOUT = 10.0
TOOL_TIMEOUT = 20.0
STOP_GRACE = 2.0
SETTLE = 2.0  # how long a window change is waited for
LAUNCH_GRACE = 1.0  # an application that ends within it failed to start: say so
STDERR_TAIL = 2000  # what is kept of an application's stderr (the rest is read and dropped)
QUIET: dict[str, Any] = dict.fromkeys(("stdin", "stdout", "stderr"), subprocess.DEVNULL)
BUTTONS = {"left": "1", "middle": "2", "right": "3"}
WHEEL = {"up": "4", "down": "5"}
# Key names a caller may know from other tools, as X keysyms (others are passed as given).
KEY_ALIASES = {
    "enter": "Return", "return": "Return", "esc": "Escape", "escape": "Escape",
    "tab": "Tab", "backspace": "BackSpace", "delete": "Delete", "del": "Delete",
    "space": "space", "up": "Up", "down": "Down", "left": "Left", "right": "Right",
    "home": "Home", "end": "End", "pageup": "Prior", "pagedown": "Next",
    "control": "ctrl", "meta": "super", "cmd": "super", "win": "super",
}  # fmt: skip


class Refused(Exception):
    """A request that cannot be done, with the HTTP status the emulator answers."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Screen:
    """One Xvfb display with its window manager, and the applications started on it."""

    def __init__(self, screen_id: str, width: int, height: int) -> None:
        self.id = screen_id
        self.width = width
        self.height = height
        self.fbdir = tempfile.mkdtemp(prefix="createos-desktop-")
        self.apps: list[subprocess.Popen[bytes]] = []
        try:
            self.server, self.display = DISPLAY.start_server(width, height, self.fbdir)
        except OSError as exc:
            raise Refused(500, str(exc)) from None
        self.env = {**os.environ, "DISPLAY": self.display}
        self.wm = self.spawn(["openbox"])
        self._wait_for_wm()

    def _wait_for_wm(self) -> None:
        """Until the window manager runs: a window mapped before it would never be listed."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and self.wm.poll() is None:
            if subprocess.run(["wmctrl", "-m"], env=self.env, capture_output=True).returncode == 0:
                return
            time.sleep(0.05)
        self.stop()
        raise Refused(500, "the window manager (openbox) did not start")

    def spawn(self, argv: list[str], *, stderr: int | None = None) -> subprocess.Popen[bytes]:
        """Start a program on this display, detached from the agent's pipes (but its stderr
        to ``stderr``, if given)."""
        quiet = QUIET if stderr is None else {**QUIET, "stderr": stderr}
        return subprocess.Popen(argv, env=self.env, start_new_session=True, **quiet)

    def run(self, *argv: str, settle: float | None = None, timeout: float = TOOL_TIMEOUT) -> str:
        """Run an X tool on this display; its output. With ``settle``, a tool still waiting
        after that many seconds is done: xdotool's ``--sync`` waits for a change, forever
        when there is none (a window asked for the size it already has)."""
        try:
            timeout = settle or timeout
            done = subprocess.run(argv, env=self.env, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            if settle is not None:
                return ""
            raise Refused(504, f"{argv[0]} did not answer") from None
        said = done.stderr.decode("utf-8", "replace")
        if done.returncode != 0:
            lines = said.strip().splitlines()
            raise Refused(400, f"{argv[0]} failed: {lines[-1][:200] if lines else 'no message'}")
        unknown = re.search(r"No such key name '([^']{0,64})'", said)  # xdotool skips it
        if unknown is not None:
            raise Refused(400, f"unknown key {unknown[1]!r}: keys are X keysym names (Return, a)")
        return done.stdout.decode("utf-8", "replace")

    def to_json(self) -> dict[str, Any]:
        ports = {"vnc_port": 0, "novnc_port": 0}  # no VNC server in the emulator
        return {"screen_id": self.id, "display": self.display, **self.size(), **ports}

    def size(self) -> dict[str, int]:
        return {"width": self.width, "height": self.height}

    def stop(self) -> None:
        # TERM first: Xvfb then removes its lock file and socket.
        processes = [*self.apps, self.wm, self.server]
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.fbdir, ignore_errors=True)


# -- the desktop: its screens and the operations on them ---------------------------


class Desktop:
    launcher = ""  # the source of desktop_launcher

    def __init__(self, width: int, height: int) -> None:
        self.screens = {"screen-0": Screen("screen-0", width, height)}

    def handle(self, request: Request) -> Any:
        op = str(request.get("op"))
        handler = getattr(self, "op_" + op.replace(".", "_"), None)
        if handler is None:
            raise Refused(400, "unknown operation")
        return handler(request)

    def screen(self, request: Request) -> Screen:
        screen = self.screens.get(request.get("screen") or "screen-0")
        if screen is None:
            raise Refused(404, "screen not found")
        return screen

    def op_screenshot(self, request: Request) -> Any:
        screen = self.screen(request)
        try:
            image = IMAGE.frame(screen.fbdir)
        except OSError as exc:
            raise Refused(500, f"the screen cannot be read: {exc}") from None
        try:
            if request.get("window_id"):
                g = self.geometry(screen, request["window_id"])
                image = IMAGE.crop(image, g["x"], g["y"], g["width"], g["height"])
            elif request.get("width") or request.get("height"):
                w, h = request.get("width") or image[0], request.get("height") or image[1]
                image = IMAGE.crop(image, request.get("x") or 0, request.get("y") or 0, w, h)
        except ValueError as exc:
            raise Refused(400, str(exc)) from None
        return {"png": base64.b64encode(IMAGE.png(image)).decode("ascii")}

    def op_screen(self, request: Request) -> Any:
        return self.screen(request).size()

    def op_cursor(self, request: Request) -> Any:
        values = _numbers(self.screen(request).run("xdotool", "getmouselocation", "--shell"))
        return {"x": values["X"], "y": values["Y"]}

    # mouse and keyboard
    def op_mouse_move(self, request: Request) -> None:
        self.screen(request).run("xdotool", "mousemove", *_xy(request))

    def op_mouse_click(self, request: Request) -> None:
        argv = ["xdotool"]
        if request.get("x") is not None and request.get("y") is not None:
            argv += ["mousemove", *_xy(request)]
        count = str(request.get("count") or 1)
        self.screen(request).run(*argv, "click", "--repeat", count, _button(request))

    def op_mouse_scroll(self, request: Request) -> None:
        amount, wheel = str(request.get("amount") or 1), WHEEL[request.get("direction") or "down"]
        self.screen(request).run("xdotool", "click", "--repeat", amount, wheel)

    def op_mouse_drag(self, request: Request) -> None:
        start, end = _xy(request["from"]), _xy(request["to"])
        self.screen(request).run(
            "xdotool", "mousemove", *start, "mousedown", "1", "mousemove", *end, "mouseup", "1",
        )  # fmt: skip

    def op_mouse_down(self, request: Request, verb: str = "mousedown") -> None:
        self.screen(request).run("xdotool", verb, _button(request))

    def op_mouse_up(self, request: Request) -> None:
        self.op_mouse_down(request, "mouseup")

    def op_keyboard_type(self, request: Request) -> None:
        """At the pace the service chose (``desktop.typing_pace``), within its time."""
        delay, seconds = str(request["delay_in_ms"]), float(request["seconds"])
        argv = ("xdotool", "type", "--delay", delay, "--", request["text"])
        self.screen(request).run(*argv, timeout=seconds)

    def op_keyboard_press(self, request: Request) -> None:
        chord = "+".join(_keysym(key) for key in request["keys"])
        self.screen(request).run("xdotool", "key", "--", chord)

    def op_keyboard_down(self, request: Request, verb: str = "keydown") -> None:
        self.screen(request).run("xdotool", verb, "--", *map(_keysym, request["keys"]))

    def op_keyboard_up(self, request: Request) -> None:
        self.op_keyboard_down(request, "keyup")

    # clipboard and applications
    def op_clipboard_get(self, request: Request) -> Any:
        screen = self.screen(request)
        try:
            return {"text": screen.run("xclip", "-selection", "clipboard", "-o")}
        except Refused:
            return {"text": ""}  # nobody owns the clipboard yet

    def op_clipboard_set(self, request: Request) -> None:
        # xclip stays in the background as the clipboard's owner: no pipe may stay with it.
        env, text = self.screen(request).env, request["text"]
        argv, quiet = ["xclip", "-selection", "clipboard", "-i"], {**QUIET, "stdin": None}
        done = subprocess.run(argv, env=env, input=text.encode(), timeout=TOOL_TIMEOUT, **quiet)
        if done.returncode != 0:
            raise Refused(400, "xclip failed")

    def op_launch(self, request: Request) -> None:
        """Start an application; one that ends at once with a failure (its status, or what
        it wrote to stderr) is refused with the tail of its stderr, not left to a timeout."""
        screen, application = self.screen(request), request["application"]
        if shutil.which(application) is None:
            raise Refused(404, "application not found")
        argv = [sys.executable, "-I", "-S", "-c", self.launcher, application]
        app = screen.spawn([*argv, *filter(None, [request.get("uri")])], stderr=subprocess.PIPE)
        screen.apps.append(app)
        tail = _Tail(app.stderr)
        try:
            status = app.wait(LAUNCH_GRACE)
        except subprocess.TimeoutExpired:
            return  # running: its stderr is drained (and dropped) as long as it runs
        text = tail.text()
        if status != 0 or text:
            why = f": {text}" if text else ""
            raise Refused(400, f"{application} ended at once with status {status}{why}")

    def op_open(self, request: Request) -> None:
        screen = self.screen(request)
        if shutil.which("xdg-open") is None:
            raise Refused(501, "xdg-open is not installed in this desktop")
        screen.apps.append(screen.spawn(["xdg-open", request["target"]]))

    # windows (ids are decimal X window ids, as xdotool writes them)
    def op_windows_list(self, request: Request) -> Any:
        found: list[dict[str, str]] = []
        application = (request.get("application") or "").lower()
        try:
            listing = self.screen(request).run("wmctrl", "-l", "-x")
        except Refused:  # openbox removes its client list with its last window
            return found
        for line in listing.splitlines():
            parts = line.split(None, 4)  # id, desktop, class, host, title
            if len(parts) < 4 or parts[1] == "-1":  # -1: sticky parts of the desktop itself
                continue
            if application and application not in parts[2].lower().split("."):
                continue
            title = parts[4] if len(parts) > 4 else ""
            found.append({"id": str(int(parts[0], 16)), "title": title})
        return found

    def op_windows_current(self, request: Request) -> Any:
        screen = self.screen(request)
        try:
            window = screen.run("xdotool", "getactivewindow").strip()
        except Refused:
            raise Refused(404, "no window is active") from None
        return self.window(screen, window)

    def op_windows_get(self, request: Request) -> Any:
        return self.window(self.screen(request), request["window"])

    def op_windows_geometry(self, request: Request) -> Any:
        return self.geometry(self.screen(request), request["window"])

    def op_windows_focus(self, request: Request) -> None:
        self.xdotool(request, "windowactivate", "--sync", request["window"])

    def op_windows_move(self, request: Request) -> None:
        self.xdotool(request, "windowmove", "--sync", request["window"], *_xy(request))

    def op_windows_resize(self, request: Request) -> None:
        size = str(request["width"]), str(request["height"])
        self.xdotool(request, "windowsize", "--sync", request["window"], *size)

    def op_windows_minimize(self, request: Request) -> None:
        self.xdotool(request, "windowminimize", "--sync", request["window"])

    def op_windows_maximize(self, request: Request) -> None:
        self.wmctrl(request, "-r", "-b", "add,maximized_vert,maximized_horz")

    def op_windows_restore(self, request: Request) -> None:
        self.wmctrl(request, "-r", "-b", "remove,maximized_vert,maximized_horz")
        self.wmctrl(request, "-a")  # and out of the minimized state

    def op_windows_close(self, request: Request) -> None:
        self.wmctrl(request, "-c")

    def xdotool(self, request: Request, *argv: str) -> None:
        screen = self.screen(request)
        self.window(screen, request["window"])
        screen.run("xdotool", *argv, settle=SETTLE)

    def wmctrl(self, request: Request, flag: str, *rest: str) -> None:
        screen = self.screen(request)
        self.window(screen, request["window"])
        screen.run("wmctrl", "-i", flag, hex(int(request["window"])), *rest)

    def window(self, screen: Screen, window: str) -> Any:
        listed = {w["id"]: w for w in self.op_windows_list({"screen": screen.id})}
        if window not in listed:
            raise Refused(404, "window not found")
        return listed[window]

    def geometry(self, screen: Screen, window: str) -> dict[str, Any]:
        """The client area as screenshots see it (xdotool's is the title bar's height low)."""
        self.window(screen, window)
        values = _numbers(screen.run("xwininfo", "-id", window), ":")
        names = {"x": "Absolute upper-left X", "y": "Absolute upper-left Y"}
        names |= {"width": "Width", "height": "Height"}
        return {"id": window, **{k: values[v] for k, v in names.items()}, "screen": 0}

    # screens
    def op_screens_list(self, request: Request) -> Any:
        return [screen.to_json() for screen in self.screens.values()]

    def op_screens_get(self, request: Request) -> Any:
        return self.screen(request).to_json()

    def op_screens_create(self, request: Request) -> Any:
        free = [f"screen-{n}" for n in range(8) if f"screen-{n}" not in self.screens]
        if not free:
            raise Refused(409, "every screen is in use")
        width = request.get("width") or DEFAULT_SIZE[0]
        height = request.get("height") or DEFAULT_SIZE[1]
        self.screens[free[0]] = Screen(free[0], width, height)
        return self.screens[free[0]].to_json()

    def op_screens_resize(self, request: Request) -> Any:
        # Xvfb cannot change its size: the display starts again, at the new size.
        old = self.screen(request)
        width, height = request.get("width") or old.width, request.get("height") or old.height
        old.stop()
        self.screens[old.id] = Screen(old.id, width, height)
        return self.screens[old.id].to_json()

    def op_screens_delete(self, request: Request) -> None:
        screen = self.screen(request)
        if screen.id == "screen-0":
            raise Refused(400, "screen-0 is the desktop's own screen")
        del self.screens[screen.id]
        screen.stop()

    def stop(self) -> None:
        for screen in self.screens.values():
            screen.stop()


class _Tail:
    """A pipe's last ``STDERR_TAIL`` bytes, read until it closes (a full pipe blocks no one)."""

    def __init__(self, pipe: Any) -> None:
        self._pipe = pipe
        self._data = b""
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with self._pipe:
            for chunk in iter(lambda: self._pipe.read1(4096), b""):
                self._data = (self._data + chunk)[-STDERR_TAIL:]

    def text(self) -> str:
        """Its last lines in printable ASCII, once closed (or after a moment: a child may not)."""
        self._thread.join(LAUNCH_GRACE)
        lines = self._data.decode("ascii", "replace").splitlines()
        kept = [" ".join("".join(c for c in line if c.isprintable()).split()) for line in lines]
        return " / ".join(line for line in kept if line)[-300:]


def _xy(point: Request) -> tuple[str, str]:
    return str(int(point["x"])), str(int(point["y"]))


def _button(request: Request) -> str:
    return BUTTONS[request.get("button") or "left"]


def _keysym(key: str) -> str:
    return "+".join(KEY_ALIASES.get(part.lower(), part) for part in key.split("+"))


def _numbers(text: str, separator: str = "=") -> dict[str, int]:
    """The integer variables of xdotool's ``--shell`` output (``Name: 3`` of xwininfo's)."""
    values = {}
    for line in text.splitlines():
        name, _, value = line.strip().partition(separator)
        if value.strip().lstrip("-").isdigit():
            values[name] = int(value)
    return values


def _answer(answer: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


def main() -> None:
    width, height = (int(v) for v in sys.argv[1:3])
    Desktop.launcher = sys.argv[3]
    exec(compile(sys.argv[4], "desktop_image.py", "exec"), IMAGE.__dict__)
    exec(compile(sys.argv[5], "desktop_display.py", "exec"), DISPLAY.__dict__)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        desktop = Desktop(width, height)
    except (OSError, Refused) as exc:
        status = exc.status if isinstance(exc, Refused) else 500
        _answer({"id": 0, "ok": False, "status": status, "message": str(exc)})
        return
    _answer({"id": 0, "ok": True, "data": desktop.screens["screen-0"].to_json()})
    try:
        for line in sys.stdin:
            request: Request = {}
            try:
                request = json.loads(line)
                answer = {"ok": True, "data": desktop.handle(request)}
            except Refused as exc:
                answer = {"ok": False, "status": exc.status, "message": exc.message}
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                answer = {"ok": False, "status": 400, "message": f"bad {type(exc).__name__}"}
            answer["id"] = request.get("id", 0) if isinstance(request, dict) else 0
            _answer(answer)
    finally:
        desktop.stop()


if __name__ == "__main__":
    main()
