"""Paths, constants and answer shapes shared by the endpoint modules."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from ..errors import ProtocolError

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
