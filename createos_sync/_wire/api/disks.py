"""Persistent disks: the account's registrations, and their mounts in a sandbox.

Credentials travel only in the bodies of ``create_disk`` and
``rotate_disk_credentials``; no answer carries them back. Being sent values,
the transport scrubs them from any server message it shows.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

from ...errors import Operation
from ..deadline import Deadline
from ..http import Transport
from ..retry import Repeat
from ..server_text import checked_id
from .common import _object, _pages, _sandbox

OP = Operation.DISK_MANAGEMENT


def _disk(id_or_name: str) -> str:
    return f"/disks/{quote(id_or_name, safe='')}"


def create_disk(t: Transport, body: Mapping[str, Any], deadline: Deadline) -> dict[str, Any]:
    """Register a disk: a creation, so never repeated after an unknown outcome."""
    reply = t.call(
        "POST", "/disks", operation=OP, repeat=Repeat.REFUSED_ONLY, deadline=deadline,
        json_body=dict(body),
    )  # fmt: skip
    data = _object(reply.data, OP)
    checked_id(data.get("id"), "disk id in the answer to a disk registration")
    return data


def list_disks(t: Transport, deadline: Deadline) -> Iterator[dict[str, Any]]:
    """Every disk registration, page by page (one request per 500)."""
    return _pages(t, "/disks", OP, "disks", deadline)


def get_disk(t: Transport, id_or_name: str, deadline: Deadline) -> dict[str, Any]:
    reply = t.call("GET", _disk(id_or_name), operation=OP, repeat=Repeat.SAFE, deadline=deadline)
    return _object(reply.data, OP)


def delete_disk(t: Transport, id_or_name: str, deadline: Deadline) -> bool:
    """Delete a registration (the bucket's contents stay); False when it was unknown (404)."""
    reply = t.call(
        "DELETE", _disk(id_or_name), operation=OP, repeat=Repeat.SAFE, deadline=deadline,
        allow=frozenset({404}),
    )  # fmt: skip
    if reply.status == 404:
        return False
    return _object(reply.data or {}, OP).get("deleted") is not False


def rotate_disk_credentials(
    t: Transport, id_or_name: str, credentials: Mapping[str, str], deadline: Deadline
) -> dict[str, Any]:
    """Replace the stored credentials (absolute values: a repeat changes nothing)."""
    reply = t.call(
        "PATCH", _disk(id_or_name), operation=OP, repeat=Repeat.SAFE, deadline=deadline,
        json_body={"credentials": dict(credentials)},
    )  # fmt: skip
    return _object(reply.data, OP)


def attach_disk(
    t: Transport,
    sandbox_id: str,
    disk_id: str,
    mount_path: str,
    sub_path: str | None,
    deadline: Deadline,
) -> dict[str, Any]:
    """Mount a disk in a running sandbox; a POST, so repeated only after 429 or 503."""
    body = {"disk_id": disk_id, "mount_path": mount_path}
    if sub_path is not None:
        body["sub_path"] = sub_path
    reply = t.call(
        "POST", f"{_sandbox(sandbox_id)}/disks", operation=OP, repeat=Repeat.REFUSED_ONLY,
        deadline=deadline, json_body=body,
    )  # fmt: skip
    return _object(reply.data, OP)


def list_sandbox_disks(
    t: Transport, sandbox_id: str, deadline: Deadline
) -> Iterator[dict[str, Any]]:
    """The disks mounted in a sandbox, with their mount status (one request per 500)."""
    return _pages(t, f"{_sandbox(sandbox_id)}/disks", OP, "disks", deadline)


def detach_disk(
    t: Transport, sandbox_id: str, disk_id: str, mount_path: str, deadline: Deadline
) -> bool:
    """Unmount (and flush) a disk, named by its id (the service resolves no names here).

    True when the service says it detached; a 404 (no such mount) is False.
    """
    reply = t.call(
        "DELETE", f"{_sandbox(sandbox_id)}/disks/{quote(disk_id, safe='')}", operation=OP,
        repeat=Repeat.SAFE, deadline=deadline, params={"mount_path": mount_path},
        allow=frozenset({404}),
    )  # fmt: skip
    if reply.status == 404:
        return False
    return bool(_object(reply.data, OP).get("detached"))
