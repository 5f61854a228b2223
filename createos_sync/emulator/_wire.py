"""The emulator's side of the wire format: JSend envelopes, body fields, timestamps.

Failures are raised as ``ApiError`` anywhere below the app and turned into one
envelope shape here: ``fail`` for 4xx, ``error`` for 5xx, as the service
usually does; the service also answers some 4xx with ``error`` envelopes
(``{"status": "error", "message": ...}``), which a fault can ask for. A
``fail`` says its reason twice, in ``data`` and in ``message``: the official
TypeScript SDK reads only ``data``, the official Python client only ``message``.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from werkzeug.wrappers import Request, Response

MAX_JSON_BODY = 64 << 20


class ApiError(Exception):
    """An HTTP failure answer: status, message, optional extra headers and data."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        data: Any = None,
        envelope: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
        self.data = data
        self.envelope = envelope or ("error" if status >= 500 else "fail")


def success(data: Any, status: int = 200) -> Response:
    return _json({"status": "success", "data": data}, status)


def failure(error: ApiError) -> Response:
    if error.envelope == "error":
        body = {"status": "error", "message": error.message, "code": error.status}
    else:
        body = {
            "status": "fail",
            "data": error.message if error.data is None else error.data,
            "message": error.message,
            "code": error.status,
        }
    response = _json(body, error.status)
    response.headers.update(error.headers)
    return response


MAX_PAGE = 500


def page(items: list[Any], total: int, limit: int, offset: int) -> dict[str, Any]:
    """One page of a listing, as the service pages its lists (``count``: the items in it)."""
    pagination = {"total": total, "limit": limit, "offset": offset, "count": len(items)}
    return {"data": items, "pagination": pagination}


def page_window(request: Request, default_limit: int = 100) -> tuple[int, int]:
    """``limit`` and ``offset`` of a list request; a limit over 500 is clamped to 500, as
    the service clamps it (the official TypeScript SDK asks for 500 and pages by what came)."""
    limit = min(query_int(request, "limit", 1, 1 << 62, default_limit), MAX_PAGE)
    return limit, query_int(request, "offset", 0, 1 << 31, 0)


def _json(body: Any, status: int) -> Response:
    return Response(json.dumps(body), status=status, mimetype="application/json")


def timestamp(when: float | None) -> str | None:
    """RFC 3339 UTC time with milliseconds, or None."""
    if when is None:
        return None
    moment = datetime.fromtimestamp(when, timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def json_body(request: Request, *, optional: bool = False) -> dict[str, Any]:
    """The request's JSON object; ``optional`` allows an empty body."""
    raw = request.stream.read(MAX_JSON_BODY + 1)
    if len(raw) > MAX_JSON_BODY:
        raise ApiError(413, "request body too large")
    if not raw.strip() and optional:
        return {}
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ApiError(400, "body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "body must be a JSON object")
    return body


def text(body: dict[str, Any], key: str, *, default: str | None = None) -> str:
    value = body.get(key, default)
    if not isinstance(value, str) or "\0" in value:
        raise ApiError(400, f"{key} must be a string without NUL")
    return value


def optional_text(body: dict[str, Any], key: str) -> str | None:
    return None if body.get(key) is None else text(body, key)


def text_list(body: dict[str, Any], key: str) -> list[str]:
    value = body.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and "\0" not in v for v in value):
        raise ApiError(400, f"{key} must be a list of strings without NUL")
    return value


def text_map(body: dict[str, Any], key: str) -> dict[str, str]:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and k and "=" not in k and "\0" not in k
        and isinstance(v, str) and "\0" not in v
        for k, v in value.items()
    ):  # fmt: skip
        raise ApiError(400, f"{key} must map names to strings (no '=', no NUL)")
    return value


def integer(body: dict[str, Any], key: str, low: int, high: int, default: int | None) -> int | None:
    value = body.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ApiError(400, f"{key} must be an integer in {low}..{high}")
    return value


def query_int(request: Request, key: str, low: int, high: int, default: int) -> int:
    raw = request.args.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, f"{key} must be an integer") from None
    if not low <= value <= high:
        raise ApiError(400, f"{key} must be in {low}..{high}")
    return value
