"""Private networks (overlays between sandboxes of the account) and their members."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from ...errors import Operation
from ..deadline import Deadline
from ..http import Transport
from ..retry import Repeat
from ..server_text import checked_id
from .common import _object, _pages, _sandbox

OP = Operation.NETWORK_MANAGEMENT


def _network(network_id: str) -> str:
    return f"/networks/{quote(network_id, safe='')}"


def create_network(t: Transport, name: str, deadline: Deadline) -> dict[str, Any]:
    """Create a network: a creation, so never repeated after an unknown outcome."""
    reply = t.call(
        "POST", "/networks", operation=OP, repeat=Repeat.REFUSED_ONLY, deadline=deadline,
        json_body={"name": name},
    )  # fmt: skip
    data = _object(reply.data, OP)
    checked_id(data.get("id"), "network id in the answer to a network creation")
    return data


def list_networks(t: Transport, deadline: Deadline) -> Iterator[dict[str, Any]]:
    """Every network, page by page (one request per 500)."""
    return _pages(t, "/networks", OP, "networks", deadline)


def get_network(t: Transport, network_id: str, deadline: Deadline) -> dict[str, Any]:
    reply = t.call("GET", _network(network_id), operation=OP, repeat=Repeat.SAFE, deadline=deadline)
    return _object(reply.data, OP)


def delete_network(t: Transport, network_id: str, deadline: Deadline) -> int:
    """Ask to delete a network; the status: 2xx, 404 (gone) or 409 (still in use)."""
    reply = t.call(
        "DELETE", _network(network_id), operation=OP, repeat=Repeat.SAFE, deadline=deadline,
        allow=frozenset({404, 409}),
    )  # fmt: skip
    return reply.status


def attach_network(t: Transport, sandbox_id: str, network_id: str, deadline: Deadline) -> None:
    """Join a running sandbox to a network; a POST, so repeated only after 429 or 503."""
    t.call(
        "POST", f"{_sandbox(sandbox_id)}/networks", operation=OP, repeat=Repeat.REFUSED_ONLY,
        deadline=deadline, json_body={"id": network_id},
    )  # fmt: skip


def detach_network(t: Transport, sandbox_id: str, network_id: str, deadline: Deadline) -> bool:
    """Take a sandbox off a network; False when it was not a member (404)."""
    reply = t.call(
        "DELETE", f"{_sandbox(sandbox_id)}/networks/{quote(network_id, safe='')}", operation=OP,
        repeat=Repeat.SAFE, deadline=deadline, allow=frozenset({404}),
    )  # fmt: skip
    return reply.status != 404
