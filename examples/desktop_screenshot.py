"""Computer use: drive a desktop sandbox's terminal with the keyboard, keep a screenshot.

A sandbox of the ``desktop:1`` image has a screen, a mouse, a keyboard and
windows (``box.computer``). This opens a terminal on it, types a command,
and saves what the screen shows as a PNG (in Jupyter, a ``Screenshot``
shows itself inline: see ``desktop.ipynb``).

Runs against CreateOS when CREATEOS_API_KEY is set, else against the local
emulator, whose desktop needs Xvfb and friends:
``apt-get install xvfb openbox xdotool wmctrl xclip xterm``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

import createos_sync as cs
from createos_sync.computer import Computer


def wait_for_window(desktop: Computer, application: str, timeout: float = 30.0) -> cs.Window:
    """The first window of ``application``, once it shows (one request per try)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        windows = desktop.windows(application=application)
        if windows:
            return windows[0]
        time.sleep(0.25)
    raise TimeoutError(f"no {application} window after {timeout:g} s")


def wait_for_file(box: cs.Lease, path: str, timeout: float = 30.0) -> str:
    """The text of ``path`` once it exists (one request per try)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return box.read_file(path).decode()
        except cs.CreateosApiError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.25)


def main(client: cs.Client, target: Path) -> None:
    with cs.lease(client=client, rootfs="desktop:1") as box:
        desktop = box.computer
        width, height = desktop.screen()
        print(f"screen: {width}x{height}")
        desktop.launch("xterm")
        terminal = wait_for_window(desktop, "xterm")
        desktop.focus(terminal)
        desktop.type("echo hello from the desktop | tee greeting.txt\n")
        print(wait_for_file(box, "/workspace/greeting.txt"), end="")  # the shell ran it
        shot = desktop.screenshot()
        print(f"screenshot: {shot.width}x{shot.height}, saved as {shot.save(target)}")


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.gettempdir()) / "desktop.png"
    if os.environ.get("CREATEOS_API_KEY"):
        main(cs.Client(), target)
    else:
        from createos_sync.emulator import Emulator

        with Emulator() as emulator, contextlib.closing(emulator.client()) as local:
            print(f"(no CREATEOS_API_KEY: local emulator, isolation={emulator.isolation})")
            main(local, target)
