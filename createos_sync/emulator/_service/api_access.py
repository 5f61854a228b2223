"""Endpoints for a sandbox's access token, SSH keys, disk size and bandwidth, and the
lookup of a sandbox by its ip."""

from __future__ import annotations

import re

from werkzeug.wrappers import Request, Response

from .._state.access import AccessStore
from .._state.sandboxes import SandboxStore
from .._wire import ApiError, integer, json_body, success, text_list

SSH_KEY = re.compile(r"(?:ssh|ecdsa|sk)-[A-Za-z0-9@.-]+ [A-Za-z0-9+/=]+(?: .*)?\Z")
MAX_DISK_MIB = 1 << 20


class AccessApi:
    def __init__(self, store: SandboxStore, access: AccessStore) -> None:
        self._store = store
        self._access = access

    def token_create(self, request: Request, sandbox_id: str) -> Response:
        self._store.live(sandbox_id)
        return success(self._access.create(sandbox_id, rotate=False))

    def token_rotate(self, request: Request, sandbox_id: str) -> Response:
        self._store.live(sandbox_id)
        return success(self._access.create(sandbox_id, rotate=True))

    def token_get(self, request: Request, sandbox_id: str) -> Response:
        self._store.live(sandbox_id)
        return success(self._access.describe(sandbox_id))

    def token_delete(self, request: Request, sandbox_id: str) -> Response:
        self._store.live(sandbox_id)
        return success(self._access.disable(sandbox_id))

    def ssh_keys(self, request: Request, sandbox_id: str) -> Response:
        sandbox = self._store.running(sandbox_id)
        keys = text_list(json_body(request), "keys")
        if not keys or not all(SSH_KEY.match(k) for k in keys):
            raise ApiError(400, "keys must be a non-empty list of OpenSSH public keys")
        return success({"count": self._access.add_keys(sandbox, keys)})

    def resize(self, request: Request, sandbox_id: str) -> Response:
        sandbox = self._store.running(sandbox_id)
        size = integer(json_body(request), "disk_mib", 1, MAX_DISK_MIB, None)
        if size is None:
            raise ApiError(400, "disk_mib is required")
        if size < sandbox.spec.disk_mib:
            raise ApiError(400, "disks only grow: disk_mib is smaller than the disk")
        self._store.configure(sandbox_id, disk_mib=size)
        return success({"id": sandbox.id, "disk_mib": size})

    def bandwidth(self, request: Request, sandbox_id: str) -> Response:
        self._store.live(sandbox_id)
        return success(self._access.bandwidth(sandbox_id))

    def recharge(self, request: Request, sandbox_id: str) -> Response:
        self._store.live(sandbox_id)
        add = integer(json_body(request), "add_bytes", 1, 1 << 53, None)
        if add is None:
            raise ApiError(400, "add_bytes is required")
        return success(self._access.bandwidth(sandbox_id, add))

    def by_ip(self, request: Request, ip: str) -> Response:
        return success(self._store.by_ip(ip).to_json())
