"""The transport: session, authentication, pacing, retries, JSend decoding, error mapping.

This is the only module that imports ``requests``. Everything above it sees
``Reply`` objects, ``Stream`` objects and ``createos_sync`` errors, never a
``requests`` exception. Error messages and log lines carry the method, the
path (never the query string), the status and the request id: nothing from
a body or a header, since CreateOS error bodies may echo secrets.
"""

from __future__ import annotations

import email.utils
import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import requests
import requests.adapters
import urllib3.exceptions

from . import _retry
from ._deadline import Deadline
from ._pacer import Pacer, shared_pacer
from ._retry import Repeat
from .config import Config
from .errors import CreateosApiError, OperationTimeout, ProtocolError

log = logging.getLogger("createos_sync.http")

CONNECT_TIMEOUT = 10.0
POOL_SIZE = 32
CHUNK_SIZE = 64 * 1024
USER_AGENT = "createos-sync/0.1.0"

Body = bytes | Callable[[], Any] | None


@attrs.frozen
class Reply:
    """A decoded JSON answer: the envelope's ``data``, or None for an allowed non-2xx status."""

    status: int
    data: Any
    request_id: str | None


class Stream:
    """A streaming answer, read as raw byte chunks; a broken connection raises
    ``CreateosApiError`` with ``status=None``."""

    def __init__(self, response: requests.Response, operation: str) -> None:
        self._response = response
        self.operation = operation
        self.status = response.status_code
        self.request_id = response.headers.get("X-Request-Id")

    @property
    def length(self) -> int | None:
        """The body's size in bytes when the answer gives it (and does not compress it)."""
        value = self._response.headers.get("Content-Length", "")
        encoding = self._response.headers.get("Content-Encoding", "identity")
        if not value.isdigit() or encoding.strip().lower() != "identity":
            return None
        return int(value)

    def chunks(self, size: int = CHUNK_SIZE) -> Iterator[bytes]:
        """Yield the body as it arrives."""
        try:
            yield from self._response.iter_content(size)
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise CreateosApiError(
                self.operation, None, detail=f"the stream broke ({type(exc).__name__})"
            ) from None

    def close(self) -> None:
        self._response.close()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def new_session() -> requests.Session:
    """A session with a pool big enough for many threads and no retries of its own."""
    session = requests.Session()
    adapter = requests.adapters.HTTPAdapter(
        pool_connections=4, pool_maxsize=POOL_SIZE, max_retries=0
    )
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session


class Transport:
    """Sends one logical request: paced, retried as its ``Repeat`` class allows, decoded."""

    def __init__(
        self,
        config: Config,
        *,
        session: requests.Session | None = None,
        sleep: _retry.Sleep = time.sleep,
        pacer: Pacer | None = None,
    ) -> None:
        self.config = config
        self._owns_session = session is None
        self._session = session if session is not None else new_session()
        self._sleep = sleep
        self._pacer = pacer or shared_pacer(config.base_url, config.requests_per_minute)

    def call(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        repeat: Repeat,
        deadline: Deadline,
        params: dict[str, str] | None = None,
        json_body: Any = None,
        body: Body = None,
        allow: frozenset[int] = frozenset(),
    ) -> Reply:
        """Send a request whose answer is a JSend JSON document.

        Statuses in ``allow`` are answers, not errors (404 on a delete, 408 on
        a long poll); they come back as a Reply with ``data=None``.
        """

        def attempt() -> Reply:
            response = self._send(
                method, path, operation, repeat, deadline, params, json_body, body
            )
            with response:
                content = self._read_body(response, operation)
            if response.status_code in allow:
                return Reply(response.status_code, None, response.headers.get("X-Request-Id"))
            self._raise_for_status(response, operation, repeat)
            return Reply(
                response.status_code,
                decode_envelope(content, operation),
                response.headers.get("X-Request-Id"),
            )

        return self._retrying(attempt, repeat, deadline)

    def stream(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        repeat: Repeat,
        deadline: Deadline,
        params: dict[str, str] | None = None,
        idle_timeout: float | None = None,
    ) -> Stream:
        """Open a streaming answer; reads that stall past ``idle_timeout`` break the stream."""

        def attempt() -> Stream:
            response = self._send(
                method,
                path,
                operation,
                repeat,
                deadline,
                params,
                None,
                None,
                stream=True,
                read_timeout=idle_timeout,
            )
            if 200 <= response.status_code < 300:
                return Stream(response, operation)
            with response:
                self._read_body(response, operation)
            self._raise_for_status(response, operation, repeat)
            raise AssertionError("unreachable: a non-2xx status always raises")

        return self._retrying(attempt, repeat, deadline)

    def reset_session(self) -> None:
        """Use a fresh session (at interpreter exit the old one may be mid-use)."""
        if self._owns_session:
            self._session = new_session()

    def close(self) -> None:
        if self._owns_session:
            self._session.close()

    def _retrying(
        self, attempt: Callable[[], _retry.T], repeat: Repeat, deadline: Deadline
    ) -> _retry.T:
        return _retry.call(
            attempt,
            repeat=repeat,
            max_retries=self.config.max_retries,
            deadline=deadline,
            sleep=self._sleep,
        )

    def _send(
        self,
        method: str,
        path: str,
        operation: str,
        repeat: Repeat,
        deadline: Deadline,
        params: dict[str, str] | None,
        json_body: Any,
        body: Body,
        *,
        stream: bool = False,
        read_timeout: float | None = None,
    ) -> requests.Response:
        self._pacer.acquire(deadline, operation)
        remaining = deadline.remaining()
        if remaining <= 0:
            raise OperationTimeout(operation, deadline.seconds)
        read = remaining if read_timeout is None else min(remaining, read_timeout)
        data = body() if callable(body) else body
        headers = {"X-Api-Key": self.config.api_key, "User-Agent": USER_AGENT}
        if body is not None:  # raw bodies are file contents (PROTOCOL.md, Files)
            headers["Content-Type"] = "application/octet-stream"
        started = time.monotonic()
        lost = None
        try:
            response = self._session.request(
                method,
                self.config.api_root + path,
                params=params,
                json=json_body,
                data=data,
                headers=headers,
                timeout=(min(CONNECT_TIMEOUT, remaining), read),
                allow_redirects=False,
                stream=stream,
            )
        except requests.RequestException as exc:
            log.debug("%s %s -> no answer (%s)", method, path, type(exc).__name__)
            lost = _lost_answer(exc, operation, repeat)
        if lost is not None:
            # Raised outside the handler: the requests exception, whose message names the
            # URL with its query string, must not stay reachable as __context__.
            raise lost
        log.debug(
            "%s %s -> %d in %.0f ms",
            method,
            path,
            response.status_code,
            (time.monotonic() - started) * 1000,
        )
        return response

    @staticmethod
    def _read_body(response: requests.Response, operation: str) -> bytes:
        try:
            return response.content
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise CreateosApiError(
                operation,
                None,
                detail=f"the answer broke off ({type(exc).__name__})",
                outcome_unknown=True,
            ) from None

    @staticmethod
    def _raise_for_status(response: requests.Response, operation: str, repeat: Repeat) -> None:
        status = response.status_code
        if 200 <= status < 300:
            return
        request_id = response.headers.get("X-Request-Id")
        if 300 <= status < 400:
            raise CreateosApiError(
                operation,
                status,
                request_id=request_id,
                detail="redirect refused (the API key is never sent to another location)",
            )
        raise CreateosApiError(
            operation,
            status,
            request_id=request_id,
            retry_after=parse_retry_after(response.headers.get("Retry-After")),
            outcome_unknown=(
                status >= 500 and repeat is not Repeat.SAFE and not _retry.refused(status, repeat)
            ),
        )


def _lost_answer(
    exc: requests.RequestException, operation: str, repeat: Repeat
) -> CreateosApiError:
    """Translate a transport failure; only a connection never made is known to be harmless."""
    if isinstance(exc, requests.ConnectTimeout) or _never_connected(exc):
        return CreateosApiError(operation, None, detail="could not connect to the service")
    what = (
        "no answer before the deadline"
        if isinstance(exc, requests.Timeout)
        else "the connection failed"
    )
    if repeat is not Repeat.SAFE:
        what += "; the request may have taken effect"
    return CreateosApiError(operation, None, detail=what, outcome_unknown=True)


def _never_connected(exc: requests.RequestException) -> bool:
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
    """Seconds to wait from a Retry-After header (seconds or an HTTP date)."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())
