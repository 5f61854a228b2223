"""Computer use on the emulator's ``desktop:1``: a real Xvfb, openbox and xterm per sandbox.

Skipped where the desktop's programs are not installed (``.ci/run`` installs
them); the refusal such a machine gives is tested with a PATH without them.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import createos_sync as cs
from createos_sync.emulator import Emulator
from createos_sync.emulator._machine.desktop import missing_packages

from ..waiting import wait_until
from .helpers import Api, bwrap_works

needs_desktop = pytest.mark.skipif(
    bool(missing_packages()),
    reason=f"the desktop needs: apt-get install {' '.join(missing_packages())}",
)


@pytest.fixture
def desktop(emu: Emulator) -> Iterator[cs.Lease]:
    with emu.client() as client, client.lease(rootfs="desktop:1") as lease:
        yield lease


def computer_requests(emu: Emulator) -> list[tuple[str, str]]:
    """(method, what follows /computer) of each computer-use request the emulator saw."""
    log = emu.request_log
    return [(r.method, r.path.split("/computer", 1)[1]) for r in log if "/computer" in r.path]


def xterm(desktop: cs.Lease) -> cs.Window:
    """Launch an xterm, focus its window, and wait until its shell reads what is typed
    (until then, a Ctrl-key would reach the terminal's line discipline, not readline)."""
    computer = desktop.computer
    computer.launch("xterm")
    (window,) = wait_until(lambda: computer.windows(application="xterm"), "the xterm's window")
    computer.focus(window)
    computer.type("touch shell-ready\n")
    wait_until(lambda: _read(desktop, "/workspace/shell-ready") == "", "the xterm's shell")
    return window


@pytest.fixture(params=["none", "bwrap"])
def isolated_box(
    request: pytest.FixtureRequest, make_emu: Callable[..., Emulator]
) -> Iterator[cs.Lease]:
    if request.param == "bwrap" and not bwrap_works():
        pytest.skip("bubblewrap does not work here")
    emu = make_emu(isolation=request.param)
    with emu.client() as client, client.lease(rootfs="desktop:1") as lease:
        yield lease


@needs_desktop
def test_a_screenshot_has_the_screens_size_and_shows_what_is_typed(
    isolated_box: cs.Lease,
) -> None:
    computer = isolated_box.computer
    width, height = computer.screen()
    before = computer.screenshot()
    assert (before.width, before.height) == (width, height) == (1024, 768)
    xterm(isolated_box)
    computer.type("echo typed-by-xdotool > typed.txt")
    computer.press("Return")
    # The shell in the xterm ran what was typed: in the sandbox's own /workspace.
    wait_until(lambda: _read(isolated_box, "/workspace/typed.txt") == "typed-by-xdotool\n")
    after = computer.screenshot()
    assert after.size == before.size
    assert after.png != before.png
    assert _differing_rows(before.png, after.png) > 10  # the window and the text in it


@needs_desktop
def test_mouse_round_trips(desktop: cs.Lease) -> None:
    computer = desktop.computer
    computer.move(10, 20)
    assert computer.cursor() == (10, 20)
    computer.click(300, 200)
    assert computer.cursor() == (300, 200)
    computer.drag(5, 6, 70, 80)
    assert computer.cursor() == (70, 80)
    computer.scroll(400, 300, dy=2)
    assert computer.cursor() == (400, 300)
    computer.mouse_down()
    computer.mouse_up()


@needs_desktop
def test_clipboard_round_trip(desktop: cs.Lease) -> None:
    computer = desktop.computer
    assert computer.clipboard() == ""
    computer.set_clipboard("snow ☃ and\nnew lines")
    assert computer.clipboard() == "snow ☃ and\nnew lines"
    computer.set_clipboard("replaced")
    assert computer.clipboard() == "replaced"


@needs_desktop
def test_keyboard_reaches_the_focused_window(desktop: cs.Lease) -> None:
    computer = desktop.computer
    window = xterm(desktop)
    assert computer.active_window() == window
    computer.key_down("shift")
    computer.type("a")
    computer.key_up("shift")
    computer.type(" > keys.txt")
    computer.press("ctrl", "a")  # to the line's start: "echo " goes before what was typed
    computer.type("echo ")
    computer.press("Return")
    wait_until(lambda: _read(desktop, "/workspace/keys.txt") == "A\n")


@needs_desktop
def test_windows_round_trips(desktop: cs.Lease) -> None:
    computer = desktop.computer
    window = xterm(desktop)
    assert window.title == "xterm"
    first = computer.window_geometry(window)
    computer.resize_window(window, 400, 300)
    computer.resize_window(window, 400, 300)  # no change to wait for: still done at once
    resized = computer.window_geometry(window)
    assert (resized.width, resized.height) != (first.width, first.height)
    computer.move_window(window, 50, 60)
    moved = computer.window_geometry(window)
    assert (moved.x, moved.y) != (resized.x, resized.y)
    computer.maximize(window)
    maximized = computer.window_geometry(window)
    assert maximized.width >= 1000  # the screen's width, less the frame's borders
    computer.restore(window)
    assert computer.window_geometry(window).width == resized.width
    computer.minimize(window)
    computer.restore(window)
    assert computer.screenshot(window=window).size == (resized.width, resized.height)
    computer.close_window(window)
    wait_until(lambda: computer.windows() == [], "the window to close")


@needs_desktop
def test_screens_round_trips(desktop: cs.Lease) -> None:
    computer = desktop.computer
    assert [s.id for s in computer.screens()] == ["screen-0"]
    second = computer.add_screen(640, 480)
    assert (second.id, second.width, second.height) == ("screen-1", 640, 480)
    assert second.display != computer.screens()[0].display
    assert computer.on(second).screenshot().size == (640, 480)
    assert computer.on(second).screen() == (640, 480)
    assert computer.screen() == (1024, 768)  # screen-0 is untouched
    resized = computer.resize_screen(second, 320, 200)
    assert computer.on(resized).screenshot().size == (320, 200)
    computer.remove_screen(second)
    assert [s.id for s in computer.screens()] == ["screen-0"]
    assert computer.screenshot(region=(10, 20, 30, 40)).size == (30, 40)


@needs_desktop
def test_request_counts(desktop: cs.Lease, emu: Emulator) -> None:
    computer = desktop.computer
    computer.screen()  # the desktop starts on its first request
    emu.clear_request_log()
    computer.screenshot()
    computer.click(1, 2, double=True)
    computer.scroll(3, 4, dy=-1)
    computer.type("")
    computer.set_clipboard("x")
    computer.clipboard()
    assert computer_requests(emu) == [
        ("GET", "/screenshot"),
        ("POST", "/mouse/click"),
        ("POST", "/mouse/move"),
        ("POST", "/mouse/scroll"),
        ("PUT", "/clipboard"),
        ("GET", "/clipboard"),
    ]


@needs_desktop
def test_the_desktop_is_not_a_listed_process_and_ends_with_its_sandbox(emu: Emulator) -> None:
    with emu.client() as client, client.lease(rootfs="desktop:1") as desktop:
        path = f"/sandboxes/{desktop.id}/processes"
        before = client.request("GET", path)  # the lease's own (its ttl watchdog)
        desktop.computer.screen()
        assert client.request("GET", path) == before
        assert emu.live_processes() != []  # the agent, Xvfb and openbox
    assert emu.live_processes() == []


def test_a_sandbox_without_a_desktop_says_so(emu: Emulator) -> None:
    with emu.client() as client, client.lease() as box:
        computer = box.computer
        with pytest.raises(cs.CreateosApiError) as caught:
            computer.screenshot()
    assert caught.value.status == 400 and "desktop:1" in str(caught.value)


def test_a_machine_without_the_desktop_programs_names_the_packages(
    emu: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # none of Xvfb, openbox, xdotool... is found
    with emu.client() as client, pytest.raises(cs.CreateosApiError) as caught:
        client.lease(rootfs="desktop:1").open()
    assert caught.value.status == 400
    message = str(caught.value)
    for package in ("xvfb", "openbox", "xdotool", "wmctrl", "xclip", "xterm"):
        assert package in message


def _read(box: cs.Lease, path: str) -> str | None:
    """The file's text; None while it does not exist."""
    try:
        return box.read_file(path).decode()
    except cs.CreateosApiError:
        return None


def _differing_rows(a: bytes, b: bytes) -> int:
    """How many pixel rows differ between two PNGs (of the agent's making: one IDAT chunk)."""
    import struct
    import zlib

    def rows(png: bytes) -> list[bytes]:
        width = struct.unpack(">I", png[16:20])[0]
        length = struct.unpack(">I", png[33:37])[0]
        raw = zlib.decompress(png[41 : 41 + length])
        stride = 1 + width * 3
        return [raw[i : i + stride] for i in range(0, len(raw), stride)]

    return sum(x != y for x, y in zip(rows(a), rows(b), strict=True))


@needs_desktop
def test_pause_freezes_the_desktop_and_resume_brings_it_back(desktop: cs.Lease) -> None:
    computer = desktop.computer
    window = xterm(desktop)
    desktop.pause()
    with pytest.raises(cs.SandboxUnavailable, match=r"is paused: call resume\(\) first"):
        computer.screenshot()
    desktop.resume()
    assert computer.windows() == [window]  # the same desktop, frozen meanwhile


@needs_desktop
def test_an_application_that_ends_at_once_is_refused_with_its_error(desktop: cs.Lease) -> None:
    # Not a silent launch whose window never shows: its status and the tail of its stderr.
    with pytest.raises(cs.CreateosApiError, match=r"ended at once with status 2: .*No such file"):
        desktop.computer.launch("ls", uri="/no-such-file")
    assert desktop.computer.windows() == []


@needs_desktop
def test_a_desktop_whose_agent_died_starts_again(desktop: cs.Lease, emu: Emulator) -> None:
    computer = desktop.computer
    computer.set_clipboard("before")
    with emu.client() as client:
        answer = client.request("GET", f"/sandboxes/{desktop.id}/processes")
    listed = {p["process_id"] for p in answer["processes"]}  # the lease's own
    (agent,) = [p for p in emu.live_processes() if p.process_id not in listed]
    for pid in agent.pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_until(lambda: agent.process_id not in {p.process_id for p in emu.live_processes()})
    assert computer.clipboard() == ""  # a new desktop, with an empty clipboard
    assert computer.screenshot().size == (1024, 768)


@needs_desktop
def test_the_emulator_checks_what_it_is_sent(api: Api) -> None:
    sandbox_id = api.sandbox(rootfs="desktop:1")
    base = f"/v1/sandboxes/{sandbox_id}/computer"
    refused = [
        ("GET", "/screen", {"params": {"screen_id": "screen-9"}}, 400),
        ("POST", "/mouse/click", {"json": {"button": "back"}}, 400),
        ("POST", "/mouse/move", {"json": {"x": -1, "y": 0}}, 400),
        ("POST", "/keyboard/press", {"json": {"keys": ["a b"]}}, 400),
        ("POST", "/keyboard/type", {"json": {"text": 7}}, 400),
        ("POST", "/launch", {"json": {"application": "sh -c reboot"}}, 400),
        ("POST", "/launch", {"json": {"application": "no-such-application"}}, 404),
        ("POST", "/windows/not-a-window/focus", {}, 404),
        ("POST", "/windows/99999/focus", {}, 404),
        ("DELETE", "/screens/screen-0", {}, 400),
        ("GET", "/screens/screen-3", {}, 404),
        ("GET", "/screens/screen-0/connect", {}, 501),
    ]
    for method, path, kwargs, status in refused:
        assert api.call(method, base + path, **kwargs).status_code == status, path
    shot = api.call("GET", base + "/screenshot")
    assert shot.headers["Content-Type"] == "image/png" and shot.content.startswith(b"\x89PNG")


@needs_desktop
def test_requests_at_once_start_one_desktop(api: Api, emu: Emulator) -> None:
    sandbox_id = api.sandbox(rootfs="desktop:1")
    path = f"/v1/sandboxes/{sandbox_id}/computer/screens"
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: api.data("GET", path), range(8)))
    assert all([s["screen_id"] for s in a] == ["screen-0"] for a in answers)
    assert len(emu.live_processes()) == 1  # one desktop agent (and its X server, window manager)


def _pixel(png: bytes, x: int, y: int) -> tuple[int, ...]:
    """The RGB of one pixel of a PNG of the agent's making (8-bit RGB, one IDAT chunk)."""
    import struct
    import zlib

    width = struct.unpack(">I", png[16:20])[0]
    length = struct.unpack(">I", png[33:37])[0]
    raw = zlib.decompress(png[41 : 41 + length])
    start = y * (1 + width * 3) + 1 + x * 3
    return tuple(raw[start : start + 3])


@needs_desktop
def test_window_geometry_is_the_client_area_where_screenshots_show_it(desktop: cs.Lease) -> None:
    computer = desktop.computer
    window = xterm(desktop)
    computer.move_window(window, 100, 120)
    g = computer.window_geometry(window)
    png = computer.screenshot().png
    white = (255, 255, 255)  # xterm's background, and its inner border
    right = g.x + g.width - 3  # away from the prompt and the cursor, at the left
    assert _pixel(png, right, g.y) == white and _pixel(png, right, g.y + g.height - 1) == white
    assert _pixel(png, right, g.y - 1) != white  # the frame's title bar, above
    assert _pixel(png, right, g.y + g.height) != white  # below the window
    assert _pixel(png, g.x, g.y + 5) == white and _pixel(png, g.x - 1, g.y + 5) != white
    assert computer.screenshot(window=window).size == (g.width, g.height)


@needs_desktop
def test_an_unknown_key_is_refused_not_ignored(desktop: cs.Lease) -> None:
    computer = desktop.computer
    with pytest.raises(cs.CreateosApiError, match=r"unknown key .*: keys are X keysym names"):
        computer.press("nosuchkey")
    with pytest.raises(cs.CreateosApiError, match=r"unknown key .*: keys are X keysym names"):
        computer.key_down("shift", "nosuchkey")
    computer.key_up("shift")
    computer.press("ctrl", "a")  # names it knows are pressed as before
