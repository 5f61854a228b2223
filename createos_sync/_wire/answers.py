"""What an answer means: JSend decoding, error statuses and bodies, request ids, Retry-After.

The transport (``http``) sends and receives; this module turns what came back
into data or a ``createos_sync`` error, showing nothing from a header and from
a body only the ``message`` of a 4xx, scrubbed of the key and of every value
the request sent (CreateOS error bodies may echo secrets).
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

import requests
import urllib3.exceptions

from ..errors import CreateosApiError, ProtocolError
from .retry import Repeat
from .server_text import request_id, scrub

if TYPE_CHECKING:
    from .cutoff import Cutoff


class Request(Protocol):
    """What an answer's meaning depends on of the request that got it (``http`` makes it)."""

    @property
    def operation(self) -> str: ...
    @property
    def repeat(self) -> Repeat: ...
    @property
    def body(self) -> object: ...
    def sent(self) -> tuple[str, ...]: ...


LATE = "no answer before the deadline"
# Fixed explanations of statuses whose meaning does not depend on the request.
PLAIN_STATUS_TEXT = {
    401: "the API key was rejected (check CREATEOS_API_KEY)",
    402: "the account cannot create more sandboxes: payment required",
}


def raise_for_status(
    response: requests.Response, content: bytes, request: Request, api_key: str
) -> None:
    """Raise the ``CreateosApiError`` a non-2xx answer means; nothing from a header or body
    but a scrubbed 4xx ``message``, the status and a checked request id."""
    status = response.status_code
    if 200 <= status < 300:
        return
    request_id = request_id_of(response, (api_key, *request.sent()))
    if 300 <= status < 400:
        raise CreateosApiError(
            request.operation,
            status,
            request_id=request_id,
            detail="redirect refused (the API key is never sent to another location)",
        )
    message = None
    if status < 500:
        message = server_message(content, request, api_key)
    raise CreateosApiError(
        request.operation,
        status,
        request_id=request_id,
        detail=PLAIN_STATUS_TEXT.get(status, message),
        retry_after=parse_retry_after(response.headers.get("Retry-After")),
        outcome_unknown=status >= 500 and status != 503 and request.repeat is not Repeat.SAFE,
        server_message=message,
    )


def read_body(response: requests.Response, request: Request, cutoff: Cutoff) -> bytes:
    try:
        return response.content
    except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
        broke = LATE if cutoff.fired else f"the answer broke off ({type(exc).__name__})"
    raise CreateosApiError(request.operation, None, detail=broke, outcome_unknown=True)


def request_id_of(response: requests.Response, secrets: Iterable[str] = ()) -> str | None:
    """The answer's ``X-Request-Id`` if it looks like one and holds none of ``secrets``
    (the key, every value the request sent); else the placeholder."""
    return request_id(response.headers.get("X-Request-Id"), secrets)


def server_message(content: bytes, request: Request, api_key: str) -> str | None:
    """The ``message`` of an error envelope (``fail`` or ``error``), fit to show.

    A request with a raw body (a file's contents) withholds it: an echo of
    those contents cannot be recognised, so nothing the service says is shown.
    """
    if request.body is not None:
        return None
    try:
        document = json.loads(content)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict) or document.get("status") not in ("fail", "error"):
        return None
    text = document.get("message")
    if not isinstance(text, str) or not text.strip():
        text = document.get("data")  # JSend "fail" may explain in data alone
    return scrub(text, (api_key, *request.sent()))


def lost_answer(
    exc: requests.RequestException,
    operation: str,
    repeat: Repeat,
    *,
    late: bool = False,
    service: str | None = None,
) -> CreateosApiError:
    """Translate a transport failure; only a connection never made is known to be harmless.

    ``late``: the request's cutoff fired (its deadline passed mid-answer). ``service``:
    the base URL (validated: no user information, no query), named when unreachable.
    """
    if isinstance(exc, requests.ConnectTimeout) or never_connected(exc):
        at = f" at {service}" if service else ""
        return CreateosApiError(operation, None, detail=f"could not connect to the service{at}")
    what = LATE if late or isinstance(exc, requests.Timeout) else "the connection failed"
    if repeat is not Repeat.SAFE:
        what += "; the request may have taken effect"
    return CreateosApiError(operation, None, detail=what, outcome_unknown=True)


def never_connected(exc: requests.RequestException) -> bool:
    reason = exc.args[0] if exc.args else None
    reason = getattr(reason, "reason", reason)
    return isinstance(reason, urllib3.exceptions.NewConnectionError)


def decode_envelope(content: bytes, operation: str) -> Any:
    """Return the ``data`` of a JSend success envelope; an empty body means no data."""
    if not content.strip():
        return None
    try:
        document = json.loads(content)
    except (ValueError, RecursionError):  # nesting deeper than the decoder recurses is junk too
        raise ProtocolError(f"the answer to {operation} is not JSON") from None
    if not isinstance(document, dict) or document.get("status") != "success":
        raise ProtocolError(f"the answer to {operation} is not a JSend success envelope")
    return document.get("data")


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header: seconds (``7``, ``1.5``) or an HTTP date."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        seconds = None
    if seconds is not None:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())
