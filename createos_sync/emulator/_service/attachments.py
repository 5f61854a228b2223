"""What a sandbox is attached to besides its own storage: disks, networks, tokens, keys.

One object the sandbox endpoints share: a creation checks the disks and
networks it asks for before the sandbox exists, and wires them once it
does; a destroy lets go of all of it (``SandboxStore.on_destroy``).
"""

from __future__ import annotations

from typing import Any

from .._state.access import AccessStore
from .._state.disks import DiskRecord, DiskStore
from .._state.overlays import OverlayStore
from .._state.sandboxes import Sandbox, SandboxStore
from .._wire import ApiError

Wanted = tuple[list[tuple[DiskRecord, str, str]], list[str]]


class Attachments:
    def __init__(
        self, store: SandboxStore, disks: DiskStore, overlays: OverlayStore, access: AccessStore
    ) -> None:
        self.disks = disks
        self.overlays = overlays
        self.access = access
        store.on_destroy.append(self.forget)
        store.on_close.append(overlays.close)

    def wanted(self, body: dict[str, Any]) -> Wanted:
        """The disks and networks a creation asks for, checked (400/404 before it is made)."""
        disks = body.get("disks") or []
        networks = body.get("networks") or []
        if not isinstance(disks, list) or not all(isinstance(d, dict) for d in disks):
            raise ApiError(400, "disks must be a list of {disk_id, mount_path, sub_path?}")
        if not isinstance(networks, list) or not all(
            isinstance(n, dict) and isinstance(n.get("id"), str) for n in networks
        ):
            raise ApiError(400, "networks must be a list of {id}")
        mounts = [self.disks.check_mount(d) for d in disks]
        if len({path for _, path, _ in mounts}) != len(mounts):
            raise ApiError(400, "two disks at one mount_path")
        ids = [n["id"] for n in networks]
        for network_id in ids:
            self.overlays.find(network_id)
        return mounts, ids

    def attach(self, sandbox: Sandbox, wanted: Wanted) -> None:
        mounts, networks = wanted
        for record, path, sub in mounts:
            self.disks.mount(sandbox, record, path, sub)
        for network_id in networks:
            self.overlays.join(sandbox, network_id)

    def forget(self, sandbox: Sandbox) -> None:
        self.disks.forget(sandbox)
        self.overlays.forget(sandbox)
        self.access.forget(sandbox.id)
