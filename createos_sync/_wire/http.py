"""The transport: session, authentication, pacing, retries; what answers mean is ``answers``.

This is the only module that imports ``requests``. Everything above it sees
``Reply`` objects, ``Stream`` objects and ``createos_sync`` errors, never a
``requests`` exception. Error messages and log lines carry the method, the
path (never the query string), the status and the request id: nothing from
a header, and from a body only the ``message`` of a 4xx, scrubbed of the
key and of every value that request sent (the transport knows them: the
string leaves of the JSON body and the query's values), since CreateOS
error bodies may echo secrets. Every request is cut at its deadline
(``_cutoff``), however slowly its answer trickles in.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import requests
import requests.adapters
import urllib3.exceptions

from ..config import Config
from ..errors import CreateosApiError, OperationTimeout
from . import cutoff as _cutoff
from . import retry as _retry
from .answers import LATE, decode_envelope, lost_answer, raise_for_status, read_body
from .cutoff import Cutoff
from .deadline import Deadline
from .logredact import redact_queries_for
from .pacer import Pacer, shared_pacer
from .retry import Repeat
from .server_text import no_surrogates, sent_values

log = logging.getLogger("createos_sync.http")

CONNECT_TIMEOUT = 10.0
POOL_SIZE = 32
CHUNK_SIZE = 64 * 1024
# After a stream's last expected frame, how long and how much of the body's rest is
# read for the connection's sake: the service ends the body right after the exit frame.
DRAIN_SECONDS = 0.25
DRAIN_BYTES = 16 * 1024
USER_AGENT = "createos-sync/0.1.0"

Body = bytes | Callable[[], Any] | None


@attrs.frozen
class Reply:
    """A decoded JSON answer: the envelope's ``data``, or None for an allowed non-2xx status.

    No request id: only an error shows one (``raise_for_status`` checks it).
    """

    status: int
    data: Any


class Stream:
    """A streaming answer, read as raw byte chunks; a broken connection raises
    ``CreateosApiError`` with ``status=None``.

    Closing a stream whose body was read to its end returns the connection to
    the pool; closing it earlier discards the connection. ``finish`` reads
    what little is left after a reader is done, so that it can be reused.
    """

    def __init__(
        self,
        response: requests.Response,
        operation: str,
        cutoff: Cutoff | None = None,
    ) -> None:
        self._response = response
        self._cutoff = cutoff
        self._body: Iterator[bytes] | None = None
        self.operation = operation
        self.status = response.status_code

    @property
    def length(self) -> int | None:
        """The body's size in bytes when the answer gives it (and does not compress it)."""
        value = self._response.headers.get("Content-Length", "")
        encoding = self._response.headers.get("Content-Encoding", "identity")
        if not value.isdigit() or encoding.strip().lower() != "identity":
            return None
        return int(value)

    def chunks(self, size: int = CHUNK_SIZE) -> Iterator[bytes]:
        """Yield the body as it arrives; at the deadline, the stream breaks off."""
        if self._body is None:
            self._body = self._response.iter_content(size)
        broke = None
        try:
            # A loop, not ``yield from``: a reader that stops early closes this generator,
            # which must leave the body itself to ``finish``.
            for chunk in self._body:  # noqa: UP028 (see above)
                yield chunk
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            broke = f"the stream broke ({type(exc).__name__})"
        if self._cutoff is not None and self._cutoff.fired:
            broke = LATE  # even a clean end: a cut socket may just look closed
        if broke is not None:
            raise CreateosApiError(self.operation, None, detail=broke)

    def finish(self, seconds: float = DRAIN_SECONDS, limit: int = DRAIN_BYTES) -> bool:
        """Read the rest of the body, if it ends within ``seconds`` and ``limit`` bytes.

        True when it ended: ``close`` then returns the connection to the pool.
        A server that keeps the stream open costs at most about ``seconds``
        (each read waits at most what is left of them), then the connection
        is discarded as before. What is read here is thrown away.
        """
        if self._body is None:
            self._body = self._response.iter_content(CHUNK_SIZE)
        ends = time.monotonic() + seconds
        received = 0
        try:
            while received <= limit:
                left = ends - time.monotonic()
                if left <= 0:
                    return False
                self._bound_reads(left)
                received += len(next(self._body))
        except StopIteration:
            return True
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError):
            pass  # timed out or broke: the connection is not reusable
        return False

    def bound_by(self, deadline: Deadline | None) -> None:
        """Cut the stream at ``deadline`` (None: no longer), as a request is cut at its own:
        a stream kept across commands is bounded by each command's deadline in turn."""
        if self._cutoff is not None:
            self._cutoff.cancel()
            self._cutoff = None
        connection = getattr(self._response.raw, "connection", None)
        if deadline is None or connection is None:
            return
        self._cutoff = _cutoff.Cutoff(deadline)
        self._cutoff.claim(connection)

    def cut(self) -> None:
        """Break the stream off now, from any thread, as its deadline would (a read in
        progress ends at once); a stream with no deadline bound has nothing to cut."""
        cutoff = self._cutoff
        if cutoff is not None:
            cutoff.fire_now()

    def read_within(self, seconds: float) -> None:
        """Make the next reads of ``chunks`` give up after ``seconds`` of silence (the
        stream then breaks): a stream kept open across commands has no deadline of its own."""
        self._bound_reads(seconds)

    def _bound_reads(self, seconds: float) -> None:
        """Make each socket read wait at most ``seconds`` (none is needed once urllib3
        has seen the body end and released the connection)."""
        connection = getattr(self._response.raw, "connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            sock.settimeout(seconds)  # the pool sets its own timeout on the next request

    def close(self) -> None:
        if self._cutoff is not None:
            self._cutoff.cancel()
        self._response.close()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _Adapter(requests.adapters.HTTPAdapter):
    """requests' adapter: pools whose connections a ``Cutoff`` can cut at the request's
    deadline, verifying certificates against ``ca_bundle`` when one is configured.

    A session's ``verify`` is not enough: requests replaces it, for every
    request that does not pass its own, with ``REQUESTS_CA_BUNDLE`` (or
    ``CURL_CA_BUNDLE``) when set. The adapter is the last step before the
    connection pool, so a bundle pinned here wins whatever the environment says.
    """

    # requests pickles (and unpickles) an adapter by the names listed here.
    __attrs__ = [*requests.adapters.HTTPAdapter.__attrs__, "_ca_bundle"]  # noqa: RUF012

    def __init__(self, ca_bundle: str | None) -> None:
        super().__init__(pool_connections=4, pool_maxsize=POOL_SIZE, max_retries=0)
        self._ca_bundle = ca_bundle

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(_cutoff.POOL_CLASSES)

    def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **kwargs)
        if not proxy.lower().startswith("socks"):  # SOCKS pools have connections of their own
            manager.pool_classes_by_scheme = dict(_cutoff.POOL_CLASSES)
        return manager

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: bool | str = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> requests.Response:
        if self._ca_bundle is not None:
            verify = self._ca_bundle
        return super().send(request, stream, timeout, verify, cert, proxies)


def new_session(ca_bundle: str | None = None) -> requests.Session:
    """A session with a pool big enough for many threads and no retries of its own.

    Connections are kept alive and reused: over TLS a new one costs two round
    trips before the request is even sent. It reads nothing from the
    environment (``trust_env`` off): its user passes what ``Environment``
    read once, and ``~/.netrc`` is never read.
    """
    session = requests.Session()
    session.trust_env = False
    adapter = _Adapter(ca_bundle)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session


@attrs.frozen
class Environment:
    """What requests reads from the environment for a request to the API, read once.

    With ``trust_env`` on, requests reads it afresh for every request (twice
    through ``os.environ``, and ``~/.netrc``): the proxies for the API's host
    (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, ``NO_PROXY``, and where
    Python reads them, the system's settings) and the CA bundle
    (``REQUESTS_CA_BUNDLE``, then ``CURL_CA_BUNDLE``). They depend on the host
    only, which is the same for every request of a client: requests' own
    reading, done once, gives what it would give for each.
    """

    proxies: dict[str, str] = attrs.field(repr=False)  # a proxy's URL may hold a password
    verify: bool | str

    @classmethod
    def read(cls, api_root: str) -> Environment:
        with requests.Session() as reader:
            settings = reader.merge_environment_settings(api_root, {}, None, None, None)
        verify = settings["verify"]  # the session's default (True) when nothing is set
        return cls(dict(settings["proxies"]), True if verify is None else verify)


@attrs.frozen
class _Request:
    """What one logical request sends, and so what its errors must never show."""

    method: str
    path: str
    operation: str
    repeat: Repeat
    params: dict[str, str] | None
    json_body: Any
    body: Body
    inner: tuple[str, ...] = ()  # values the body carries inside a longer string (a script)

    def sent(self) -> tuple[str, ...]:
        """The values this request carried (its raw body aside: see ``answers.server_message``)."""
        return (*sent_values(self.json_body, self.params), *self.inner)


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
        redact_queries_for(config.api_root)  # urllib3's own DEBUG lines would show them
        self._owns_session = session is None
        self._session = session if session is not None else new_session(config.ca_bundle)
        # An owned session is told what the environment said now; a given one reads it itself.
        self._environment = Environment.read(config.api_root) if session is None else None
        self._sleep = sleep
        self._pacer = pacer or shared_pacer(
            config.base_url, config.requests_per_minute, config.rate_scope
        )

    @property
    def pacer(self) -> Pacer:
        """The request pacer this transport waits on (shared: see ``pacer``)."""
        return self._pacer

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
        secrets: Sequence[str] = (),
    ) -> Reply:
        """Send a request whose answer is a JSend JSON document.

        Statuses in ``allow`` are answers, not errors (404 on a delete, 408 on
        a long poll); they come back as a Reply with ``data=None``. ``secrets``
        are values the body carries inside longer strings (a script's env values
        and argv items): no server text shown from the answer holds them either.
        """
        request = _Request(method, path, operation, repeat, params, json_body, body, tuple(secrets))
        for value in request.sent():  # the callers check first, naming the argument
            no_surrogates(f"a value the request for {operation} would carry", value)

        def attempt() -> Reply:
            with Cutoff(deadline) as cutoff:
                response = self._send(request, deadline, cutoff)
                with response:
                    content = read_body(response, request, cutoff)
            if response.status_code in allow:
                return Reply(response.status_code, None)
            raise_for_status(response, content, request, self.config.api_key)
            return Reply(response.status_code, decode_envelope(content, operation))

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
        """Open a streaming answer; a read that stalls past ``idle_timeout`` breaks the
        stream, and the deadline ends it wherever it is."""
        request = _Request(method, path, operation, repeat, params, None, None)

        def attempt() -> Stream:
            cutoff = Cutoff(deadline)
            try:
                response = self._send(request, deadline, cutoff, read_timeout=idle_timeout)
                if 200 <= response.status_code < 300:
                    return Stream(response, operation, cutoff)
                with response:
                    content = read_body(response, request, cutoff)
            except BaseException:
                cutoff.cancel()
                raise
            cutoff.cancel()
            raise_for_status(response, content, request, self.config.api_key)
            raise AssertionError("unreachable: a non-2xx status always raises")

        return self._retrying(attempt, repeat, deadline)

    def reset_session(self) -> None:
        """Use a fresh session (at interpreter exit the old one may be mid-use)."""
        if self._owns_session:
            self._session = new_session(self.config.ca_bundle)

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
        request: _Request,
        deadline: Deadline,
        cutoff: Cutoff,
        *,
        read_timeout: float | None = None,
    ) -> requests.Response:
        """Send the request; the answer's body is left to read (under ``cutoff``)."""
        self._pacer.acquire(deadline, request.operation)
        remaining = deadline.remaining()
        if remaining <= 0:
            raise OperationTimeout(request.operation, deadline.seconds)
        read = remaining if read_timeout is None else min(remaining, read_timeout)
        if not math.isfinite(read):  # no deadline (a background process): still no hang
            read = self.config.timeout
        started = time.monotonic()
        lost = None
        try:
            with cutoff.sending():
                # What Session.request does, less reading the environment for each request.
                prepared = self._session.prepare_request(
                    requests.Request(
                        request.method,
                        self.config.api_root + request.path,
                        params=request.params or {},
                        json=request.json_body,
                        data=(request.body() if callable(request.body) else request.body) or {},
                        headers=self._headers(raw=request.body is not None),
                    )
                )
                response = self._session.send(
                    prepared,
                    timeout=(min(CONNECT_TIMEOUT, remaining), read),
                    allow_redirects=False,
                    **self._settings(prepared.url),
                )
        except requests.RequestException as exc:
            log.debug("%s %s -> no answer (%s)", request.method, request.path, type(exc).__name__)
            lost = lost_answer(
                exc,
                request.operation,
                request.repeat,
                late=cutoff.fired,
                service=self.config.base_url,
            )
        if lost is not None:
            # Raised outside the handler: the requests exception, whose message names the
            # URL with its query string, must not stay reachable as __context__.
            raise lost
        log.debug(
            "%s %s -> %d in %.0f ms",
            request.method,
            request.path,
            response.status_code,
            (time.monotonic() - started) * 1000,
        )
        return response

    def _settings(self, url: str | None) -> dict[str, Any]:
        """How ``Session.send`` sends to ``url``: proxies, CA bundle, streaming, client
        certificate; what the environment says is read once for an owned session."""
        if self._environment is None:  # a given session reads it for each request, as before
            return dict(self._session.merge_environment_settings(url, {}, True, None, None))
        return {
            "proxies": self._environment.proxies,
            "verify": self._environment.verify,
            "stream": True,
            "cert": None,
        }

    def _headers(self, *, raw: bool) -> dict[str, str]:
        # The key is an ApiKey: in a traceback's locals this dict shows it masked.
        headers = {"X-Api-Key": self.config.api_key, "User-Agent": USER_AGENT}
        if raw:  # raw bodies are file contents (PROTOCOL.md, Files)
            headers["Content-Type"] = "application/octet-stream"
        return headers
