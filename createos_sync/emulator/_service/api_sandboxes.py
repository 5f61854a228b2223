"""Endpoints for the catalog, sandbox lifecycle and settings, egress rules and files.

Egress rules (strings: host names, ``*.`` wildcards, CIDRs) are stored and
returned, never enforced: a sandbox's commands reach whatever the host
reaches, on the host's network or through their private network's NAT
(``_netns``).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from typing import Any

from werkzeug.wrappers import Request, Response
from werkzeug.wsgi import FileWrapper

from .._machine.desktop import ROOTFS as DESKTOP_ROOTFS
from .._machine.desktop import require_tools
from .._machine.storage import CHUNK, PathRefused
from .._state.catalog import (
    DEFAULT_ROOTFS,
    ROOTFS_NAMES,
    SHAPES,
    hosts_json,
    rootfs_json,
    shapes_json,
)
from .._state.sandbox import ForkChanges, SandboxSpec
from .._state.sandboxes import SandboxStore
from .._state.templates import TemplateStore
from .._wire import (
    ApiError,
    integer,
    json_body,
    optional_text,
    page,
    page_window,
    success,
    text,
    text_list,
    text_map,
)
from .attachments import Attachments

MAX_NAME = 22
STATUSES = (
    "creating", "running", "pausing", "paused", "resuming", "forking",
    "error", "destroying", "destroyed", "failed",
)  # fmt: skip


class SandboxApi:
    def __init__(
        self, store: SandboxStore, templates: TemplateStore, attached: Attachments
    ) -> None:
        self._store = store
        self._templates = templates
        self._attached = attached

    def healthz(self, request: Request) -> Response:
        return success({"up": True})

    def readyz(self, request: Request) -> Response:
        return success({"ready": True})

    def hosts(self, request: Request) -> Response:
        hosts = hosts_json()
        limit, offset = page_window(request)
        return success(page(hosts[offset : offset + limit], len(hosts), limit, offset))

    def shapes(self, request: Request) -> Response:
        items = shapes_json()
        return success(page(items, len(items), len(items), 0))

    def rootfs(self, request: Request) -> Response:
        return success(rootfs_json())

    def create(self, request: Request) -> Response:
        body = json_body(request)
        shape = SHAPES.get(text(body, "shape"))
        if shape is None:
            raise ApiError(400, "unknown shape")
        rootfs = text(body, "rootfs", default=DEFAULT_ROOTFS)
        template = None if rootfs in ROOTFS_NAMES else self._templates.find(rootfs)
        if rootfs not in ROOTFS_NAMES and (template is None or template.status != "ready"):
            raise ApiError(400, "unknown rootfs (neither a base image nor a ready template)")
        if rootfs == DESKTOP_ROOTFS:
            require_tools()  # a clear refusal naming the packages, not a desktop that fails later
        ingress = _flag(body, "ingress_enabled")
        envs = text_map(body, "envs")
        spec = SandboxSpec(
            shape=shape,
            rootfs=rootfs,
            region=text(body, "region", default="local"),
            name=_name(body),
            disk_mib=integer(body, "disk_mib", 256, 1 << 20, shape.default_disk_mib) or 0,
            envs={**template.env, **envs} if template is not None else envs,
            egress=_rules(body),
            auto_pause_after_seconds=integer(body, "auto_pause_after_seconds", 60, 86400, None),
            ingress_enabled=bool(ingress),
            workdir=template.workdir if template is not None else "/workspace",
            lowers=template.lowers if template is not None else (),
        )
        if body.get("bandwidth_quota_bytes") is not None:
            raise ApiError(400, "bandwidth_quota_bytes cannot be set at creation (fork, recharge)")
        keys = text_list(body, "ssh_pubkeys")
        wanted = self._attached.wanted(body)  # disks and networks: checked before it exists
        seed = template.root if template is not None else None
        sandbox = self._store.create(spec, seed)
        try:
            self._attached.attach(sandbox, wanted)
        except BaseException:
            self._store.destroy(sandbox.id)
            raise
        if keys:
            self._attached.access.add_keys(sandbox, keys)
        return success(self._store.started(sandbox))

    def list(self, request: Request) -> Response:
        limit, offset = page_window(request)
        status = request.args.get("status") or None
        if status is not None and status not in STATUSES:
            raise ApiError(400, "unknown status")
        chosen, total = self._store.page(status, limit, offset)
        return success(page([s.to_json() for s in chosen], total, limit, offset))

    def get(self, request: Request, sandbox_id: str) -> Response:
        return success(self._store.get(sandbox_id).to_json())

    def whoami(self, request: Request) -> Response:
        """The caller and its sandbox counts, as the official SDK's ``who_am_i`` reads them."""
        statuses = [s.settle() for s in self._store.page(None, 1 << 31, 0)[0]]
        running, paused = statuses.count("running"), statuses.count("paused")
        stats = {
            "running": running,
            "paused": paused,
            "other": len(statuses) - running - paused,
            "total": len(statuses),
        }
        return success({"user_id": "emulator", "stats": stats})

    def delete(self, request: Request, sandbox_id: str) -> Response:
        """Destroy; a sandbox destroyed before answers 200 with its status, as on the
        service (the official TypeScript SDK's ``DestroyedResponse``), not 404."""
        earlier = self._store.get(sandbox_id)
        status = earlier.settle()
        if status in ("destroying", "destroyed"):
            return success({"id": earlier.id, "status": status})
        sandbox = self._store.destroy(sandbox_id)
        return success({"id": sandbox.id, "status": sandbox.began})

    def pause(self, request: Request, sandbox_id: str) -> Response:
        return success(self._store.pause(sandbox_id).answer())

    def resume(self, request: Request, sandbox_id: str) -> Response:
        return success(self._store.resume(sandbox_id).answer())

    def fork(self, request: Request, sandbox_id: str) -> Response:
        body = json_body(request, optional=True)
        changes = ForkChanges(
            start_paused=bool(_flag(body, "start_paused")),
            egress=_rules(body) if body.get("egress") is not None else None,
            envs=text_map(body, "envs"),
            ingress_enabled=_flag(body, "ingress_enabled"),
        )
        keys = text_list(body, "ssh_pubkeys")
        quota = integer(body, "bandwidth_quota_bytes", 1, 1 << 53, None)
        sandbox = self._store.fork(sandbox_id, changes)
        if keys:
            self._attached.access.add_keys(sandbox, keys)
        if quota is not None:
            self._attached.access.set_quota(sandbox.id, quota)
        return success(sandbox.answer())

    def patch(self, request: Request, sandbox_id: str) -> Response:
        """Change ingress and auto-pause of a live sandbox; answers the sandbox."""
        body = json_body(request)
        changes: dict[str, Any] = {}
        ingress = _flag(body, "ingress_enabled")
        if ingress is not None:
            changes["ingress_enabled"] = ingress
        seconds = integer(body, "auto_pause_after_seconds", 60, 86400, None)
        disable = _flag(body, "disable_auto_pause")
        if seconds is not None and disable:
            raise ApiError(400, "give auto_pause_after_seconds or disable_auto_pause, not both")
        if seconds is not None or disable:
            changes["auto_pause_after_seconds"] = seconds
        if not changes:
            raise ApiError(
                400, "nothing to change: ingress_enabled, auto_pause_after_seconds, "
                "disable_auto_pause"
            )  # fmt: skip
        return success(self._store.configure(sandbox_id, **changes).to_json())

    def egress(self, request: Request, sandbox_id: str) -> Response:
        sandbox = self._store.live(sandbox_id)
        if request.method == "PUT":
            sandbox.egress = _rules(json_body(request))
        return success({"id": sandbox.id, "egress": sandbox.egress})

    def file_write(self, request: Request, sandbox_id: str) -> Response:
        sandbox = self._store.running(sandbox_id)
        path = _path_arg(request)
        try:
            layered = self._store.isolation.layered(sandbox.storage)
            size = sandbox.storage.write(path, _chunks(request), layered)
        except PathRefused as exc:
            raise ApiError(exc.status, str(exc)) from None
        except (NotADirectoryError, IsADirectoryError, FileExistsError, FileNotFoundError):
            # FileNotFoundError: a command removed the directory while the file was written.
            raise ApiError(400, "a parent of the path is not a directory") from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EXDEV):
                message = "the path leads through a symlink out of the sandbox's tree"
                raise ApiError(403, message) from None
            if exc.errno != errno.ENAMETOOLONG:
                raise
            raise ApiError(400, "the path is too long") from None
        return success({"path": path, "size": size})

    def file_read(self, request: Request, sandbox_id: str) -> Response:
        sandbox = self._store.running(sandbox_id)
        try:
            layered = self._store.isolation.layered(sandbox.storage)
            fd, size = sandbox.storage.open_read(_path_arg(request), layered)
        except PathRefused as exc:
            raise ApiError(exc.status, str(exc)) from None
        except (FileNotFoundError, NotADirectoryError):
            raise ApiError(404, "file not found") from None
        body = FileWrapper(os.fdopen(fd, "rb"), CHUNK)
        response = Response(body, mimetype="application/octet-stream", direct_passthrough=True)
        response.headers["Content-Length"] = str(size)
        return response


def _rules(body: dict[str, Any]) -> list[str]:
    rules = body.get("egress")
    if rules is None:
        return []
    if not isinstance(rules, list) or not all(
        isinstance(r, str) and r and not any(c.isspace() or not c.isprintable() for c in r)
        for r in rules
    ):
        raise ApiError(400, "egress must be a list of rule strings (hosts, *.wildcards, CIDRs)")
    return rules


def _name(body: dict[str, Any]) -> str | None:
    """A sandbox name: at most ``MAX_NAME`` characters (the Langflow backend measured the
    service's limit live); that no live sandbox holds it is checked by the store."""
    name = optional_text(body, "name")
    if name is not None and not 1 <= len(name) <= MAX_NAME:
        raise ApiError(400, f"name must be 1 to {MAX_NAME} characters")
    return name


def _flag(body: dict[str, Any], key: str) -> bool | None:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise ApiError(400, f"{key} must be a boolean")
    return value


def _path_arg(request: Request) -> str:
    path = request.args.get("path")
    if not path:
        raise ApiError(400, "path is required")
    return path


def _chunks(request: Request) -> Iterator[bytes]:
    while chunk := request.stream.read(CHUNK):
        yield chunk
