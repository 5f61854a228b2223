"""Templates: custom root filesystems built from a Dockerfile, and their build logs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from ...errors import Operation
from ..deadline import Deadline
from ..http import Stream, Transport
from ..retry import Repeat
from ..server_text import checked_id
from .common import STREAM_IDLE_TIMEOUT, _object, _pages

# Templates


def _template(template_id: str) -> str:
    return f"/templates/{quote(template_id, safe='')}"


def create_template(
    t: Transport, name: str, dockerfile: str, base: str | None, deadline: Deadline
) -> dict[str, Any]:
    """Submit a build; a lost answer is not repeated (a build may have started)."""
    body = {"name": name, "dockerfile": dockerfile}
    if base is not None:
        body["base"] = base
    reply = t.call(
        "POST",
        "/templates",
        operation=Operation.TEMPLATE_BUILD,
        repeat=Repeat.REFUSED_ONLY,
        deadline=deadline,
        json_body=body,
    )
    data = _object(reply.data, Operation.TEMPLATE_BUILD)
    checked_id(data.get("id"), "template id in the answer to a template build")
    return data


def get_template(t: Transport, template_id: str, deadline: Deadline) -> dict[str, Any]:
    reply = t.call(
        "GET",
        _template(template_id),
        operation=Operation.TEMPLATE_MANAGEMENT,
        repeat=Repeat.SAFE,
        deadline=deadline,
    )
    return _object(reply.data, Operation.TEMPLATE_MANAGEMENT)


def list_templates(t: Transport, deadline: Deadline) -> Iterator[dict[str, Any]]:
    """Every template, page by page (one request per 500)."""
    return _pages(t, "/templates", Operation.TEMPLATE_MANAGEMENT, "templates", deadline)


def delete_template(t: Transport, template_id: str, deadline: Deadline) -> bool:
    """Delete a template; 404 means it is already gone, which is success (False)."""
    reply = t.call(
        "DELETE",
        _template(template_id),
        operation=Operation.TEMPLATE_MANAGEMENT,
        repeat=Repeat.SAFE,
        deadline=deadline,
        allow=frozenset({404}),
    )
    return reply.status != 404


def follow_template_log(t: Transport, template_id: str, deadline: Deadline) -> Stream:
    """The build log as NDJSON events ``{ts, level, line, attempt, final, status}``, live.

    (inferred) Each connection replays the log from its first line, then
    follows it until the final event.
    """
    return t.stream(
        "GET",
        f"{_template(template_id)}/logs",
        operation=Operation.TEMPLATE_LOG,
        repeat=Repeat.REFUSED_ONLY,  # reconnection is the build follower's job
        deadline=deadline,
        params={"follow": "true"},
        idle_timeout=STREAM_IDLE_TIMEOUT,
    )
