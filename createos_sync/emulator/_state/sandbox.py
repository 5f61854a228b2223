"""One sandbox's record: what it was made with, its status and transitions, its answer.

The store (``sandboxes``) owns the records and drives their processes and files.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._machine.netns import Network
from .._machine.processes import ManagedProcess
from .._machine.storage import Storage
from .._wire import timestamp
from .catalog import Shape


@dataclass(frozen=True)
class LiveProcess:
    """A managed process whose tree still has a running OS process."""

    sandbox_id: str
    process_id: str
    pids: tuple[int, ...]


@dataclass(frozen=True)
class SandboxSpec:
    shape: Shape
    rootfs: str
    region: str
    name: str | None
    disk_mib: int
    envs: dict[str, str]
    egress: list[str]
    auto_pause_after_seconds: int | None
    ingress_enabled: bool
    workdir: str = "/workspace"  # a template's WORKDIR: where commands start by default
    lowers: tuple[Path, ...] = ()  # a template's layers, under the sandbox's own
    forked_from: str | None = None


@dataclass(frozen=True)
class ForkChanges:
    """What a fork request changes from its source (None: the source's)."""

    start_paused: bool = False
    egress: list[Any] | None = None
    envs: dict[str, str] = field(default_factory=dict)
    ingress_enabled: bool | None = None


@dataclass
class Sandbox:
    id: str
    spec: SandboxSpec
    storage: Storage
    ip: str
    status: str
    due: float
    target: str | None
    created_at: float = field(default_factory=time.time)
    paused_at: float | None = None
    spawn_ms: int = 0
    last_active: float = field(default_factory=time.monotonic)
    ingress_exchanges: int = 0  # open requests through the preview proxy
    ingress_url_template: str = ""
    egress: list[str] = field(default_factory=list)
    processes: dict[str, ManagedProcess] = field(default_factory=dict)
    net: Network | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)
    began: str = ""  # the status the last transition's request answers with
    ssh_pubkeys: list[str] = field(default_factory=list)

    def settle(self) -> str:
        """Finish a transition whose delay has passed; the current status."""
        with self.lock:
            if self.target is not None and time.monotonic() >= self.due:
                if self.target == "paused":
                    self.paused_at = time.time() - (time.monotonic() - self.due)
                self.status, self.target = self.target, None
            return self.status

    def begin(self, status: str, target: str, delay: float) -> None:
        self.status, self.target, self.due = status, target, time.monotonic() + delay
        self.began = status if delay > 0 else target

    def answer(self) -> dict[str, Any]:
        """The record as the request that began its transition answers it.

        The service answers as the transition starts, so the status is the one it
        began with, however long the emulator took to answer (a fork runs ``cp``
        first, a destroy removes the storage, a loaded machine stalls): settling it
        here would let that time use up ``transition_delay``. Later reads settle it
        as usual; a destroy answers with ``began`` alone.
        """
        record = self.to_json()
        if record["status"] != self.began:
            record["status"] = self.began
            record.pop("paused_at", None)
        return record

    def to_json(self) -> dict[str, Any]:
        """The sandbox view. Fields the service marks ``omitempty`` are left out when they
        have no value, never null (``name``, ``paused_at``, ``auto_pause_after_seconds``,
        ``forked_from``, ``ip`` while creating); ``ingress_url_template`` is there only while
        ingress is on (the official TypeScript SDK relies on both)."""
        status = self.settle()
        spec = self.spec
        view: dict[str, Any] = {
            "id": self.id,
            "name": spec.name,
            "status": status,
            "ip": None if status == "creating" else self.ip,
            "shape": spec.shape.id,
            "rootfs": spec.rootfs,
            "vcpu": spec.shape.vcpu,
            "mem_mib": spec.shape.mem_mib,
            "disk_mib": spec.disk_mib,
            "spawn_ms": self.spawn_ms,
            "egress": self.egress,
            "envs": sorted(spec.envs),  # the names only, never the values
            "ssh_pubkeys": list(self.ssh_pubkeys),
            "region": spec.region,
            "ingress_enabled": spec.ingress_enabled,
            "ingress_url_template": self.ingress_url_template if spec.ingress_enabled else None,
            "created_at": timestamp(self.created_at),
            "paused_at": timestamp(self.paused_at) if status == "paused" else None,
            "auto_pause_after_seconds": spec.auto_pause_after_seconds,
            "forked_from": spec.forked_from,
        }
        return {key: value for key, value in view.items() if value is not None}

    def idle_for(self, now: float) -> float:
        streaming = self.ingress_exchanges > 0 or any(
            p.journal.readers() for p in list(self.processes.values())
        )
        return 0.0 if streaming else now - self.last_active
