"""Templates: records, their build logs, and where their layers live.

A template is built (``_builder``) in a scratch storage under
``templates/<id>/``; once ``ready`` that directory is the template: its
``layer/`` (what the ``RUN`` steps wrote outside the storage trees, under
bubblewrap with overlays) becomes a read-only lower layer of every sandbox
made from it, and its ``workspace``, ``tmp`` and ``home`` seed theirs. The
build log is a list of events, ``{ts, level, line, attempt, final, status}``,
that followers replay from the start and then follow live.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .._machine.layers import UPPER, remove_tree
from .._wire import ApiError, timestamp

if TYPE_CHECKING:
    from .sandboxes import SandboxStore


class Builder(Protocol):
    """What runs one template's build (``builder.Build``; given by the server, so that this
    module, which the builder reads, never imports it back)."""

    def __call__(
        self, template: Template, templates: TemplateStore, *, frame_bytes: int
    ) -> Runnable: ...


class Runnable(Protocol):
    def run(self) -> None: ...


MAX_DOCKERFILE = 256 * 1024
MAX_LINE = 8192


class BuildLog:
    """The events of one build, appended by the builder, read by any number of followers."""

    def __init__(self) -> None:
        self._events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._final = False

    def add(self, line: str, *, level: str = "info", status: str = "building") -> None:
        self._append(line[:MAX_LINE], level, status, final=False)

    def finish(self, line: str, status: str) -> None:
        self._append(line, "error" if status == "failed" else "info", status, final=True)

    def _append(self, line: str, level: str, status: str, *, final: bool) -> None:
        event = {"ts": timestamp(time.time()), "level": level, "line": line, "attempt": 1,
                 "final": final, "status": status}  # fmt: skip
        with self._cond:
            if self._final:
                return
            self._events.append(event)
            self._final = final
            self._cond.notify_all()

    def since(self, index: int, timeout: float) -> tuple[list[dict[str, Any]], bool]:
        """Events from ``index`` on (waiting up to ``timeout`` for one), and whether that is all."""
        with self._cond:
            self._cond.wait_for(lambda: len(self._events) > index or self._final, timeout)
            return self._events[index:], self._final

    def text(self) -> str:
        with self._cond:
            return "".join(f"{event['line']}\n" for event in self._events)


@dataclass
class Template:
    id: str
    name: str
    dockerfile: str
    requested_base: str | None
    root: Path
    status: str = "pending"
    base: str = ""
    created_at: float = field(default_factory=time.time)
    built_at: float | None = None
    size: int = 0
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/workspace"
    lowers: tuple[Path, ...] = ()  # what a sandbox made from it lies on, topmost first
    log: BuildLog = field(default_factory=BuildLog)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def to_json(self, *, dockerfile: bool = False) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "base": self.base or self.requested_base or "",
            "status": self.status,
            "ext4_size_bytes": self.size,
            "created_at": timestamp(self.created_at),
            "built_at": timestamp(self.built_at),
        }
        if dockerfile:
            answer["dockerfile"] = self.dockerfile
        return answer


class TemplateStore:
    """Every template of one emulator; builds run on threads of their own."""

    def __init__(
        self, sandboxes: SandboxStore, root: Path, builder: Builder, *, frame_bytes: int
    ) -> None:
        self.sandboxes = sandboxes
        self._builder = builder
        self._root = root
        self._frame_bytes = frame_bytes
        self._lock = threading.Lock()
        self._templates: dict[str, Template] = {}
        self._builds: list[threading.Thread] = []

    def submit(self, name: str, dockerfile: str, base: str | None) -> Template:
        template_id = f"tpl-{secrets.token_hex(8)}"
        template = Template(template_id, name, dockerfile, base, self._root / template_id)
        with self._lock:
            self._templates[template_id] = template
        build = self._builder(template, self, frame_bytes=self._frame_bytes)
        thread = threading.Thread(target=build.run, name=f"emulator-build-{template_id}")
        thread.daemon = True
        with self._lock:
            self._builds = [t for t in self._builds if t.is_alive()] + [thread]
        thread.start()
        return template

    def get(self, template_id: str) -> Template:
        with self._lock:
            template = self._templates.get(template_id)
        if template is None:
            raise ApiError(404, "template not found")
        return template

    def find(self, template_id: str) -> Template | None:
        with self._lock:
            return self._templates.get(template_id)

    def page(self, limit: int, offset: int) -> tuple[list[Template], int]:
        with self._lock:
            every = list(self._templates.values())
        return every[offset : offset + limit], len(every)

    def delete(self, template_id: str) -> Template:
        """Forget the template; its files stay while sandboxes made from it still use them."""
        with self._lock:
            template = self._templates.pop(template_id, None)
        if template is None:
            raise ApiError(404, "template not found")
        template.cancelled.set()
        if not self.sandboxes.uses_layer(template.root / UPPER):
            remove_tree(template.root)
        return template

    def close(self) -> None:
        """Stop every build (its running step is killed) and wait for their threads."""
        with self._lock:
            every, builds = list(self._templates.values()), list(self._builds)
        for template in every:
            template.cancelled.set()
        for thread in builds:
            thread.join(timeout=10)
