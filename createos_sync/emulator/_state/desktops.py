"""Which sandbox has which desktop: started on the first computer-use request, one at a time.

A desktop belongs to a running ``desktop:1`` sandbox (any other answers
400). Its agent is a managed process of the sandbox (``_machine/desktop``),
so pause, resume and destroy reach it as they reach every process; a
desktop whose agent has ended (destroyed sandbox, killed agent) is started
again by the next request.
"""

from __future__ import annotations

import threading
from typing import Any

from .._machine.desktop import (
    AGENT,
    ANSWER_TIMEOUT,
    DEFAULT_SIZE,
    DISPLAY,
    IMAGE,
    KIND,
    LAUNCHER,
    ROOTFS,
    Desktop,
    require_tools,
)
from .._machine.processes import Command
from .._wire import ApiError
from .sandboxes import SandboxStore


class Desktops:
    """Every desktop of one emulator, by sandbox id; started on first use."""

    def __init__(self, store: SandboxStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._desktops: dict[str, Desktop] = {}
        self._starting: dict[str, threading.Lock] = {}
        self._source = AGENT.read_text(encoding="utf-8")
        self._launcher = LAUNCHER.read_text(encoding="utf-8")
        self._image = IMAGE.read_text(encoding="utf-8")
        self._display = DISPLAY.read_text(encoding="utf-8")

    def ask(
        self, sandbox_id: str, request: dict[str, Any], *, timeout: float = ANSWER_TIMEOUT
    ) -> Any:
        """Run one request on the desktop of a running ``desktop:1`` sandbox; ``timeout``:
        how long its answer may take."""
        sandbox = self._store.running(sandbox_id)
        if sandbox.spec.rootfs != ROOTFS:
            raise ApiError(400, f"this sandbox has no desktop: create it with rootfs {ROOTFS}")
        return self._desktop(sandbox_id).ask(request, timeout=timeout)

    def _desktop(self, sandbox_id: str) -> Desktop:
        with self._lock:
            self._forget_stopped()
            starting = self._starting.setdefault(sandbox_id, threading.Lock())
        with starting:  # one start per sandbox, however many requests arrive at once
            with self._lock:
                desktop = self._desktops.get(sandbox_id)
            if desktop is not None and desktop.alive:
                return desktop
            desktop = self._start(sandbox_id)
            with self._lock:
                self._desktops[sandbox_id] = desktop
            return desktop

    def _start(self, sandbox_id: str) -> Desktop:
        require_tools()
        width, height = DEFAULT_SIZE
        argv = ["-I", "-S", "-c", self._source, str(width), str(height), self._launcher]
        argv += [self._image, self._display]
        command = Command("python3", argv, "/workspace", {})
        process = self._store.new_process(KIND, command)
        desktop = Desktop(process)
        reader = process.journal.attach(0)  # before it starts: its first line is the answer
        try:
            self._store.spawn(sandbox_id, process)
            desktop.wait_ready(reader)
        except BaseException:
            process.stop()
            raise
        finally:
            reader.close()
        return desktop

    def _forget_stopped(self) -> None:
        """Under ``_lock``: drop the records of desktops whose agent has ended (a start lock
        stays: one small lock per desktop sandbox, so that two starts never race)."""
        for sandbox_id in [k for k, d in self._desktops.items() if not d.alive]:
            del self._desktops[sandbox_id]
