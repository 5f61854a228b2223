"""Computer use over the wire: one request per call, checks first, retries by method."""

from __future__ import annotations

import inspect
import json
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

import createos_sync as cs
from createos_sync import Client
from createos_sync.computer import Computer, Screen, WindowGeometry

from .test_docstrings import undocumented
from .wire import KEY, SANDBOX, Service, sandbox

C = f"/sandboxes/{SANDBOX}/computer"


def png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    rows = b"".join(b"\x00" + b"\x10\x20\x30" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))


@pytest.fixture
def box_sandbox() -> dict[str, Any]:
    return sandbox(rootfs="desktop:1")


@pytest.fixture
def box_options() -> dict[str, Any]:
    return {"rootfs": "desktop:1"}


def computer_calls(service: Service) -> list[tuple[str, str, dict[str, list[str]], Any]]:
    """(method, path under /computer, query, JSON body) of each computer-use request."""
    found = []
    for call in service.calls(contains="/computer"):
        url = urlsplit(call.request.url)
        body = json.loads(call.request.body) if call.request.body else None
        path = url.path.split("/computer", 1)[1]
        found.append((call.request.method, path, parse_qs(url.query), body))
    return found


# --- one request per call, with the official client's paths and bodies ---------

ACTIONS: list[tuple[Callable[[Computer], Any], str, str, Any]] = [
    (lambda c: c.move(10, 20), "POST", "/mouse/move", {"x": 10, "y": 20}),
    (lambda c: c.click(5, 6), "POST", "/mouse/click", {"button": "left", "x": 5, "y": 6}),
    (
        lambda c: c.click(5, 6, button="right", double=True),
        "POST",
        "/mouse/click",
        {"button": "right", "x": 5, "y": 6, "count": 2},
    ),
    (
        lambda c: c.drag(1, 2, 3, 4),
        "POST",
        "/mouse/drag",
        {"from": {"x": 1, "y": 2}, "to": {"x": 3, "y": 4}},
    ),
    (lambda c: c.mouse_down("middle"), "POST", "/mouse/down", {"button": "middle"}),
    (lambda c: c.mouse_up(), "POST", "/mouse/up", {"button": "left"}),
    (lambda c: c.type("héllo\n"), "POST", "/keyboard/type", {"text": "héllo\n"}),
    (lambda c: c.press("ctrl", "c"), "POST", "/keyboard/press", {"keys": ["ctrl", "c"]}),
    (lambda c: c.key_down("shift"), "POST", "/keyboard/down", {"keys": ["shift"]}),
    (lambda c: c.key_up("shift"), "POST", "/keyboard/up", {"keys": ["shift"]}),
    (lambda c: c.set_clipboard("copied"), "PUT", "/clipboard", {"text": "copied"}),
    (lambda c: c.launch("xterm"), "POST", "/launch", {"application": "xterm"}),
    (
        lambda c: c.launch("firefox", uri="https://example.com/"),
        "POST",
        "/launch",
        {"application": "firefox", "uri": "https://example.com/"},
    ),
    (lambda c: c.open("/workspace/a.txt"), "POST", "/open", {"target": "/workspace/a.txt"}),
    (lambda c: c.focus("42"), "POST", "/windows/42/focus", None),
    (lambda c: c.move_window("42", 7, 8), "POST", "/windows/42/move", {"x": 7, "y": 8}),
    (
        lambda c: c.resize_window("42", 300, 200),
        "POST",
        "/windows/42/resize",
        {"width": 300, "height": 200},
    ),
    (lambda c: c.maximize("42"), "POST", "/windows/42/maximize", None),
    (lambda c: c.minimize("42"), "POST", "/windows/42/minimize", None),
    (lambda c: c.restore("42"), "POST", "/windows/42/restore", None),
    (lambda c: c.close_window("42"), "DELETE", "/windows/42", None),
    (lambda c: c.remove_screen("screen-1"), "DELETE", "/screens/screen-1", None),
]


@pytest.mark.parametrize(("act", "method", "path", "body"), ACTIONS)
def test_each_action_is_one_request(
    box: cs.Lease,
    service: Service,
    act: Callable[[Computer], Any],
    method: str,
    path: str,
    body: Any,
) -> None:
    service.add(method, C + path, body={})
    assert act(box.computer) is None
    assert computer_calls(service) == [(method, path, {}, body)]


def test_scroll_moves_there_first_then_scrolls(box: cs.Lease, service: Service) -> None:
    service.add("POST", C + "/mouse/move", body={})
    service.add("POST", C + "/mouse/scroll", body={})
    box.computer.scroll(100, 200, dy=-3)
    assert computer_calls(service) == [
        ("POST", "/mouse/move", {}, {"x": 100, "y": 200}),
        ("POST", "/mouse/scroll", {}, {"direction": "up", "amount": 3}),
    ]


def test_typing_nothing_sends_nothing(box: cs.Lease, service: Service) -> None:
    box.computer.type("")
    assert computer_calls(service) == []


def test_reads(box: cs.Lease, service: Service) -> None:
    service.add("GET", C + "/screen", body={"width": 1024, "height": 768})
    service.add("GET", C + "/cursor", body={"x": 3, "y": 4})
    service.add("GET", C + "/clipboard", body={"text": "copied ☃"})
    service.add("GET", C + "/windows", body=[{"id": "42", "title": "xterm"}])
    service.add("GET", C + "/windows/current", body={"id": "42", "title": "xterm"})
    geometry = {"id": "42", "x": 1, "y": 2, "width": 30, "height": 40}
    service.add("GET", C + "/windows/42/geometry", body=geometry)
    computer = box.computer
    assert computer.screen() == (1024, 768)
    assert computer.cursor() == (3, 4)
    assert computer.clipboard() == "copied ☃"
    windows = computer.windows()
    assert windows == [cs.Window("42", "xterm")]
    assert computer.active_window() == windows[0]
    assert computer.window_geometry(windows[0]) == WindowGeometry(1, 2, 30, 40)
    assert [c[:2] for c in computer_calls(service)] == [
        ("GET", "/screen"),
        ("GET", "/cursor"),
        ("GET", "/clipboard"),
        ("GET", "/windows"),
        ("GET", "/windows/current"),
        ("GET", "/windows/42/geometry"),
    ]


def test_windows_of_one_application(box: cs.Lease, service: Service) -> None:
    service.add("GET", C + "/windows", body={"data": [{"id": "7", "title": "a"}]})
    assert box.computer.windows(application="xterm") == [cs.Window("7", "a")]
    assert computer_calls(service)[0][2] == {"application": ["xterm"]}


def test_screens_and_another_screen(box: cs.Lease, service: Service) -> None:
    screen1 = {"screen_id": "screen-1", "display": ":1", "width": 640, "height": 480}
    screen0 = {"screen_id": "screen-0", "display": ":0", "width": 1024, "height": 768}
    service.add("GET", C + "/screens", body=[screen0, screen1])
    service.add("POST", C + "/screens", 201, body=screen1)
    service.add("POST", C + "/screens/screen-1/resize", body={**screen1, "width": 800})
    service.add("GET", C + "/screen", body={"width": 800, "height": 480})
    computer = box.computer
    assert [s.id for s in computer.screens()] == ["screen-0", "screen-1"]
    created = computer.add_screen(640, 480)
    assert created == Screen("screen-1", ":1", 640, 480)
    assert computer.resize_screen(created, 800, 480).width == 800
    assert computer.on(created).screen() == (800, 480)
    calls = computer_calls(service)
    assert calls[1][3] == {"width": 640, "height": 480}
    assert calls[3] == ("GET", "/screen", {"screen_id": ["screen-1"]}, None)


# --- screenshots -----------------------------------------------------------------


def test_screenshot_is_a_png_with_its_size(box: cs.Lease, service: Service, tmp_path: Path) -> None:
    image = png(4, 3)
    service.add("GET", C + "/screenshot", body=image, content_type="image/png")
    shot = box.computer.screenshot()
    assert (shot.width, shot.height, shot.size) == (4, 3, (4, 3))
    assert shot.png == image and shot._repr_png_() == image
    assert "PNG" not in repr(shot) and repr(shot).startswith("<Screenshot 4x3")
    assert shot.save(tmp_path / "shot.png").read_bytes() == image
    assert len(computer_calls(service)) == 1


def test_screenshot_of_a_window_or_a_region(box: cs.Lease, service: Service) -> None:
    service.add("GET", C + "/screenshot", body=png(2, 2), content_type="image/png")
    service.add("GET", C + "/screenshot", body=png(2, 2), content_type="image/png")
    box.computer.screenshot(window=cs.Window("42", "x"))
    box.computer.on("screen-2").screenshot(region=(1, 2, 30, 40))
    queries = [c[2] for c in computer_calls(service)]
    assert queries == [
        {"window_id": ["42"]},
        {"screen_id": ["screen-2"], "x": ["1"], "y": ["2"], "width": ["30"], "height": ["40"]},
    ]


@pytest.mark.parametrize("answer", [b"", b"GIF89a....", b'{"status":"success"}', png(1, 1)[:20]])
def test_a_screenshot_that_is_not_a_png_is_a_protocol_error(
    box: cs.Lease, service: Service, answer: bytes
) -> None:
    service.add("GET", C + "/screenshot", body=answer, content_type="image/png")
    with pytest.raises(cs.ProtocolError, match="not a PNG"):
        box.computer.screenshot()


# --- checked before any request --------------------------------------------------

BAD: list[tuple[Callable[[Computer], Any], type[Exception], str]] = [
    (lambda c: c.move(-1, 0), ValueError, r"x must be in 0\.\.32767, not -1"),
    (lambda c: c.move(0, 40000), ValueError, r"y must be in 0\.\.32767, not 40000"),
    (lambda c: c.move(1.5, 0), TypeError, r"x must be an int \(pixels\)"),
    (lambda c: c.move(True, 0), TypeError, r"x must be an int \(pixels\)"),
    (lambda c: c.click(1, 1, button="back"), ValueError, "button must be one of left, middle"),
    (lambda c: c.click(1, 1, double=1), TypeError, "double must be True or False"),
    (lambda c: c.scroll(1, 1, dx=2, dy=1), ValueError, "scrolls vertically only: dx must be 0"),
    (lambda c: c.scroll(1, 1), ValueError, "dy must say how many wheel clicks"),
    (lambda c: c.scroll(1, 1, dy=1000), ValueError, r"dy must be in -100\.\.100, not 1000"),
    (lambda c: c.type(b"bytes"), TypeError, "text must be a str"),
    (lambda c: c.type("a\x00b"), ValueError, "text must not contain NUL"),
    (lambda c: c.type("x" * 100_001), ValueError, "text is longer than 100000 characters"),
    (lambda c: c.press(), ValueError, "give at least one key"),
    (lambda c: c.press("ctrl c"), ValueError, r"a key name must be 1\.\.64 characters"),
    (lambda c: c.press(3), TypeError, "each key must be a str"),
    (lambda c: c.set_clipboard(None), TypeError, "text must be a str"),
    (lambda c: c.launch(""), ValueError, "cmd must be a non-empty line without control"),
    (lambda c: c.launch("xterm\nrm -rf /"), ValueError, "cmd must be a non-empty line"),
    (lambda c: c.open("a\x1b[2Jb"), ValueError, "target must be a non-empty line without control"),
    (lambda c: c.focus("../../x"), ValueError, "window is not a plausible window id"),
    (lambda c: c.focus(42), TypeError, r"window must be a Window \(from windows\(\)\) or its id"),
    (lambda c: c.resize_window("42", 0, 10), ValueError, r"width must be in 1\.\.16384, not 0"),
    (
        lambda c: c.screenshot(window="42", region=(0, 0, 1, 1)),
        ValueError,
        "give window or region, not both",
    ),
    (lambda c: c.screenshot(region=(0, 0, 1)), TypeError, r"region must be a tuple \(x, y,"),
    (lambda c: c.on("screen-9"), ValueError, r"screen must be one of screen-0 \.\. screen-7"),
    (lambda c: c.on("../screens"), ValueError, r"screen must be one of screen-0 \.\. screen-7"),
    (lambda c: c.add_screen(0, 100), ValueError, r"width must be in 1\.\.16384, not 0"),
    (lambda c: c.windows(application="a\nb"), ValueError, "application must be a non-empty line"),
]


@pytest.mark.parametrize(("act", "error", "message"), BAD)
def test_bad_arguments_fail_before_any_request(
    box: cs.Lease,
    service: Service,
    act: Callable[[Computer], Any],
    error: type[Exception],
    message: str,
) -> None:
    before = len(service.mock.calls)
    with pytest.raises(error, match=message):
        act(box.computer)
    assert len(service.mock.calls) == before


def test_a_closed_lease_has_no_computer_to_drive(client: Client, service: Service) -> None:
    lease = client.lease(rootfs="desktop:1")
    with pytest.raises(cs.LeaseClosed, match="this lease is not open"):
        lease.computer.screenshot()
    assert len(service.mock.calls) == 0


# --- retries by method -----------------------------------------------------------


def test_a_read_is_repeated_after_a_lost_answer(box: cs.Lease, service: Service) -> None:
    service.add("GET", C + "/cursor", 502)
    service.add("GET", C + "/cursor", body={"x": 1, "y": 2})
    assert box.computer.cursor() == (1, 2)
    assert len(computer_calls(service)) == 2


def test_the_clipboard_is_replaced_again_after_a_lost_answer(
    box: cs.Lease, service: Service
) -> None:
    service.add("PUT", C + "/clipboard", 502)
    service.add("PUT", C + "/clipboard", body={})
    box.computer.set_clipboard("x")
    assert len(computer_calls(service)) == 2


def test_an_input_is_never_repeated_after_an_unknown_outcome(
    box: cs.Lease, service: Service
) -> None:
    service.add("POST", C + "/mouse/click", 502)
    with pytest.raises(cs.CreateosApiError, match="HTTP 502 during computer use") as caught:
        box.computer.click(1, 1)
    assert caught.value.status == 502 and caught.value.outcome_unknown
    assert len(computer_calls(service)) == 1  # a second click would be a double click


def test_an_input_the_service_refused_is_sent_again(box: cs.Lease, service: Service) -> None:
    service.add("POST", C + "/keyboard/press", 503)
    service.add("POST", C + "/keyboard/press", body={})
    box.computer.press("Return")
    assert len(computer_calls(service)) == 2


# --- what the service answers is checked; secrets never shown -------------------


def test_typed_text_is_not_in_the_error_even_when_the_service_echoes_it(
    box: cs.Lease, service: Service
) -> None:
    secret = "hunter2-correct-horse"
    service.mock.add(
        "POST",
        "https://api.test/v1" + C + "/keyboard/type",
        json={"status": "fail", "message": f"cannot type {secret} ({KEY})", "code": 400},
        status=400,
    )
    with pytest.raises(cs.CreateosApiError) as caught:
        box.computer.type(secret)
    shown = f"{caught.value} {caught.value!r} {caught.value.server_message}"
    assert secret not in shown and KEY not in shown
    assert "computer use" in str(caught.value)


def test_window_titles_are_printable_and_ids_plausible(box: cs.Lease, service: Service) -> None:
    title = "evil\x1b]0;pwned\x07 title\n" + "x" * 300
    service.add("GET", C + "/windows", body=[{"id": "9", "title": title}])
    (window,) = box.computer.windows()
    assert "\x1b" not in window.title and "\n" not in window.title
    assert len(window.title) <= 200
    service.add("GET", C + "/windows", body=[{"id": "../../sandboxes", "title": "x"}])
    with pytest.raises(cs.ProtocolError, match="window id"):
        box.computer.windows()


@pytest.mark.parametrize(
    "answer", [{"width": "1024", "height": 768}, {"width": 0, "height": 1}, {}, {"width": True}]
)
def test_an_implausible_screen_size_is_a_protocol_error(
    box: cs.Lease, service: Service, answer: dict[str, Any]
) -> None:
    service.add("GET", C + "/screen", body=answer)
    with pytest.raises(cs.ProtocolError, match=r"screen width in the answer .* not plausible"):
        box.computer.screen()


def test_every_parameter_of_the_computer_is_described_in_its_docstring() -> None:
    missing = {
        name: undocumented(method, method.__doc__ or "")
        for name, method in inspect.getmembers(Computer)
        if not name.startswith("_") and callable(method)
    }
    assert {name: names for name, names in missing.items() if names} == {}
