"""The official client's computer-use flows, unchanged, against the emulator's ``desktop:1``."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import createos
import pytest
from createos import (
    ComputerClickRequest,
    ComputerCreateScreenRequest,
    ComputerDragRequest,
    ComputerLaunchRequest,
    ComputerMouseButton,
    ComputerPoint,
    ComputerScreenID,
    ComputerScreenOptions,
    ComputerScreenshotOptions,
    ComputerScrollDirection,
    ComputerScrollRequest,
    ComputerTypeRequest,
    ComputerWindowMoveRequest,
    ComputerWindowResizeRequest,
    CreateSandboxRequest,
    SandboxInstance,
    WaitOptions,
)

from createos_sync.emulator import Emulator
from createos_sync.emulator._machine.desktop import missing_packages

from ..waiting import wait_until

pytestmark = pytest.mark.skipif(
    bool(missing_packages()),
    reason=f"the desktop needs: apt-get install {' '.join(missing_packages())}",
)
WAIT = WaitOptions(timeout=30.0)


@pytest.fixture
def desktop(emu: Emulator) -> Iterator[SandboxInstance]:
    with createos.Client(api_key=emu.api_key, base_url=emu.url, timeout=30.0) as client:
        request = CreateSandboxRequest(shape="s-1vcpu-1gb", rootfs="desktop:1")
        sandbox = client.create_sandbox(request)
        try:
            sandbox.wait_until_running(WAIT)
            yield sandbox
        finally:
            sandbox.destroy()
            sandbox.wait_until_destroyed(WAIT)


def png_size(data: bytes) -> tuple[int, int]:
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_screen_screenshot_mouse_keyboard_clipboard(desktop: SandboxInstance) -> None:
    computer = desktop.computer
    geometry = computer.screen()
    with computer.screenshot() as stream:
        assert png_size(stream.read()) == (geometry.width, geometry.height)
    region = ComputerScreenshotOptions(x=0, y=0, width=100, height=50)
    with computer.screenshot(region) as stream:
        assert png_size(stream.read()) == (100, 50)
    computer.mouse.move(ComputerPoint(x=11, y=22))
    assert computer.cursor() == ComputerPoint(x=11, y=22)
    computer.mouse.click(ComputerClickRequest(button=ComputerMouseButton.LEFT, x=30, y=40))
    computer.mouse.drag(ComputerDragRequest(from_=ComputerPoint(1, 2), to=ComputerPoint(50, 60)))
    assert computer.cursor() == ComputerPoint(x=50, y=60)
    computer.mouse.scroll(ComputerScrollRequest(direction=ComputerScrollDirection.DOWN, amount=2))
    computer.keyboard.type(ComputerTypeRequest(text="hello"))
    computer.keyboard.press(["ctrl", "a"])
    computer.set_clipboard("from the official client")
    assert computer.clipboard().text == "from the official client"


def test_windows(desktop: SandboxInstance) -> None:
    computer = desktop.computer
    computer.launch(ComputerLaunchRequest(application="xterm"))
    (window,) = wait_until(lambda: computer.windows.list(), "the xterm's window")
    assert window.title == "xterm"
    computer.windows.focus(window.id)
    assert computer.windows.current().id == window.id
    assert computer.windows.get(window.id) == window
    computer.windows.resize(window.id, ComputerWindowResizeRequest(width=320, height=240))
    computer.windows.move(window.id, ComputerWindowMoveRequest(x=40, y=50))
    geometry = computer.windows.geometry(window.id)
    assert geometry.id == window.id and geometry.width > 0
    computer.windows.maximize(window.id)
    computer.windows.minimize(window.id)
    computer.windows.restore(window.id)
    computer.windows.close(window.id)
    wait_until(lambda: computer.windows.list() == [], "the window to close")


def test_screens(desktop: SandboxInstance) -> None:
    screens = desktop.computer.screens
    (first,) = screens.list()
    assert first.screen_id is ComputerScreenID.SCREEN_0 and first.width == 1024
    second = screens.create(ComputerCreateScreenRequest(width=640, height=480))
    assert second.screen_id is ComputerScreenID.SCREEN_1
    assert screens.get(second.screen_id).height == 480
    options = ComputerScreenOptions(screen_id=second.screen_id)
    assert desktop.computer.screen(options).width == 640
    resized = screens.resize(second.screen_id, ComputerCreateScreenRequest(width=800, height=600))
    assert (resized.width, resized.height) == (800, 600)
    screens.delete(second.screen_id)
    assert [s.screen_id for s in screens.list()] == [ComputerScreenID.SCREEN_0]
