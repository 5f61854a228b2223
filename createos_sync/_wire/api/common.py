"""Paths, constants and answer shapes shared by the endpoint modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from ...errors import ProtocolError
from ..deadline import Deadline
from ..http import Transport
from ..retry import Repeat

PAGE_LIMIT = 500
STREAM_IDLE_TIMEOUT = 60.0  # no byte, not even a heartbeat, for this long: the stream is dead
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE"})


def _sandbox(sandbox_id: str) -> str:
    return f"/sandboxes/{quote(sandbox_id, safe='')}"


def _process(sandbox_id: str, process_id: str) -> str:
    return f"{_sandbox(sandbox_id)}/processes/{quote(process_id, safe='')}"


def _object(data: Any, operation: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ProtocolError(f"the answer to {operation} is not a JSON object")
    return data


def _items(data: Any, operation: str, *legacy_keys: str) -> tuple[list[Any], int | None]:
    """Accept a bare list, a page ``{data, pagination}``, or a legacy keyed list."""
    if isinstance(data, list):
        return data, None
    if isinstance(data, dict):
        for key in ("data", *legacy_keys):
            if isinstance(data.get(key), list):
                pagination = data.get("pagination")
                total = pagination.get("total") if isinstance(pagination, dict) else None
                return data[key], total if isinstance(total, int) else None
    raise ProtocolError(f"the answer to {operation} is not a list")


def _pages(
    t: Transport, path: str, operation: str, legacy_key: str, deadline: Deadline
) -> Iterator[dict[str, Any]]:
    """Every item of a paged listing, page by page (one request per ``PAGE_LIMIT``)."""
    offset = 0
    while True:
        reply = t.call(
            "GET",
            path,
            operation=operation,
            repeat=Repeat.SAFE,
            deadline=deadline,
            params={"limit": str(PAGE_LIMIT), "offset": str(offset)},
        )
        items, total = _items(reply.data, operation, legacy_key)
        for item in items:
            yield _object(item, operation)
        offset += len(items)
        if not items or total is None or offset >= total:
            return
