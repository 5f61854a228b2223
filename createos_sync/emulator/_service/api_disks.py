"""Endpoints for persistent disks: the account's registrations and a sandbox's mounts.

Mounting needs a running sandbox (409 otherwise); it takes the disk's id or
its name (in ``disk_id``, as the service does), while detaching takes the id
only (names are not resolved there, as on the service). A mount shows in
commands started after it.
"""

from __future__ import annotations

from werkzeug.wrappers import Request, Response

from .._state.disks import DiskStore
from .._state.sandboxes import SandboxStore
from .._wire import ApiError, json_body, page, page_window, success


class DiskApi:
    def __init__(self, store: SandboxStore, disks: DiskStore) -> None:
        self._store = store
        self._disks = disks

    def create(self, request: Request) -> Response:
        return success(self._disks.register(json_body(request)).to_json())

    def list(self, request: Request) -> Response:
        limit, offset = page_window(request)
        every = self._disks.all()
        chosen = [d.to_json() for d in every[offset : offset + limit]]
        return success(page(chosen, len(every), limit, offset))

    def get(self, request: Request, disk: str) -> Response:
        return success(self._disks.find(disk).to_json())

    def delete(self, request: Request, disk: str) -> Response:
        self._disks.delete(disk)
        return success({"deleted": True})

    def rotate(self, request: Request, disk: str) -> Response:
        return success(self._disks.rotate(disk, json_body(request)).to_json())

    def attach(self, request: Request, sandbox_id: str) -> Response:
        sandbox = self._store.running(sandbox_id)
        record, path, sub = self._disks.check_mount(json_body(request))
        mount = self._disks.mount(sandbox, record, path, sub)
        return success({"id": sandbox.id, "disk": mount.to_json()})

    def mounts(self, request: Request, sandbox_id: str) -> Response:
        self._store.live(sandbox_id)
        found = [m.to_json() for m in self._disks.mounts(sandbox_id)]
        return success(page(found, len(found), max(len(found), 1), 0))

    def detach(self, request: Request, sandbox_id: str, disk: str) -> Response:
        sandbox = self._store.live(sandbox_id)
        if not self._disks.unmount(sandbox, disk, request.args.get("mount_path") or None):
            raise ApiError(404, "no such disk mounted in this sandbox")
        return success({"id": sandbox.id, "detached": True})
