"""Private networks: records, members and their ips (the wiring: ``_machine.links``).

A member's ip on a network is its own (``10.89.N.K`` with private
namespaces, a loopback alias ``127.89.N.K`` without), not the sandbox's
``ip``. As on the service, deleting a network is refused ("in use", 409)
while it has members and for ``in_use_after`` seconds after the last one
left or was destroyed (the service tears the overlay down asynchronously).
"""

from __future__ import annotations

import itertools
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .._machine.links import Links
from .._wire import ApiError, timestamp
from .sandboxes import Sandbox

MAX_NETWORKS = 250
MAX_MEMBERS = 252


@dataclass
class Member:
    sandbox: Sandbox
    number: int

    def to_json(self, ip: str) -> dict[str, Any]:
        status = self.sandbox.settle()
        return {"sandbox_id": self.sandbox.id, "status": status, "ip": ip,
                "name": self.sandbox.spec.name or ""}  # fmt: skip


@dataclass
class Overlay:
    id: str
    name: str
    index: int
    created_at: float = field(default_factory=time.time)
    members: dict[str, Member] = field(default_factory=dict)
    busy_until: float = 0.0

    def free_number(self) -> int:
        """The lowest member number (the last part of an ip) no member holds."""
        taken = {m.number for m in self.members.values()}
        number = next(n for n in range(2, MAX_MEMBERS + 2) if n not in taken)
        if number > MAX_MEMBERS:
            raise ApiError(409, "the network is full")
        return number


class OverlayStore:
    """Every private network of one emulator, thread-safe."""

    def __init__(self, links: Links, in_use_after: float) -> None:
        self.links = links
        self._in_use_after = in_use_after
        self._lock = threading.RLock()
        self._networks: dict[str, Overlay] = {}
        self._links = itertools.count()  # names each member's link: never reused

    def create(self, name: str) -> Overlay:
        with self._lock:
            taken = {n.index for n in self._networks.values()}
            index = next((i for i in range(1, MAX_NETWORKS + 1) if i not in taken), 0)
            if not index:
                raise ApiError(409, "too many networks")
            try:
                self.links.open(index)
            except RuntimeError as exc:  # the machine cannot wire networks: say what it needs
                raise ApiError(501, str(exc)) from None
            overlay = Overlay(f"net_{secrets.token_hex(8)}", name, index)
            self._networks[overlay.id] = overlay
        return overlay

    def find(self, network_id: str) -> Overlay:
        with self._lock:
            overlay = self._networks.get(network_id)
        if overlay is None:
            raise ApiError(404, "network not found")
        return overlay

    def all(self) -> list[Overlay]:
        with self._lock:
            return list(self._networks.values())

    def to_json(self, overlay: Overlay) -> dict[str, Any]:
        with self._lock:
            members = [
                m.to_json(self.links.address(overlay.index, m.number))
                for m in overlay.members.values()
            ]
        return {"id": overlay.id, "name": overlay.name, "created_at": timestamp(overlay.created_at),
                "member_count": len(members), "members": members}  # fmt: skip

    def delete(self, network_id: str) -> None:
        with self._lock:
            overlay = self.find(network_id)
            if overlay.members or time.monotonic() < overlay.busy_until:
                raise ApiError(409, "the network is in use")
            del self._networks[overlay.id]
            self.links.close(overlay.index)

    def join(self, sandbox: Sandbox, network_id: str) -> str:
        """Wire ``sandbox`` into the network; its ip there."""
        with self._lock:
            overlay = self.find(network_id)
            if sandbox.id in overlay.members:
                raise ApiError(409, "the sandbox is already on this network")
            number = overlay.free_number()
            self.links.join(overlay.index, number, next(self._links), sandbox.net)
            overlay.members[sandbox.id] = Member(sandbox, number)
            return self.links.address(overlay.index, number)

    def leave(self, sandbox: Sandbox, network_id: str) -> None:
        with self._lock:
            overlay = self.find(network_id)
            if overlay.members.pop(sandbox.id, None) is None:
                raise ApiError(404, "the sandbox is not on this network")
            overlay.busy_until = time.monotonic() + self._in_use_after
            self.links.leave(overlay.index, sandbox.net)

    def forget(self, sandbox: Sandbox) -> None:
        """The sandbox is being destroyed: off every network (its namespace takes the links)."""
        with self._lock:
            for overlay in self._networks.values():
                if overlay.members.pop(sandbox.id, None) is not None:
                    overlay.busy_until = time.monotonic() + self._in_use_after

    def close(self) -> None:
        with self._lock:
            for overlay in self._networks.values():
                self.links.close(overlay.index)
            self._networks.clear()
