"""Endpoints for private networks and their members (see ``_state.overlays``)."""

from __future__ import annotations

import re

from werkzeug.wrappers import Request, Response

from .._state.overlays import OverlayStore
from .._state.sandboxes import SandboxStore
from .._wire import ApiError, json_body, page, page_window, success, text

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")


class NetworkApi:
    def __init__(self, store: SandboxStore, overlays: OverlayStore) -> None:
        self._store = store
        self._overlays = overlays

    def create(self, request: Request) -> Response:
        name = text(json_body(request), "name", default="")
        if not NAME.match(name):
            raise ApiError(400, "name must be 1..63 letters, digits, '.', '_' and '-'")
        return success(self._overlays.to_json(self._overlays.create(name)))

    def list(self, request: Request) -> Response:
        limit, offset = page_window(request)
        every = self._overlays.all()
        chosen = [self._overlays.to_json(n) for n in every[offset : offset + limit]]
        return success(page(chosen, len(every), limit, offset))

    def get(self, request: Request, network_id: str) -> Response:
        return success(self._overlays.to_json(self._overlays.find(network_id)))

    def delete(self, request: Request, network_id: str) -> Response:
        self._overlays.delete(network_id)
        return success({"id": network_id, "deleted": True})

    def attach(self, request: Request, sandbox_id: str) -> Response:
        sandbox = self._store.running(sandbox_id)
        network_id = text(json_body(request), "id", default="")
        ip = self._overlays.join(sandbox, network_id)
        return success({"id": sandbox.id, "network_id": network_id, "ip": ip})

    def detach(self, request: Request, sandbox_id: str, network_id: str) -> Response:
        sandbox = self._store.running(sandbox_id)
        self._overlays.leave(sandbox, network_id)
        return success({"id": sandbox.id, "network_id": network_id, "detached": True})
