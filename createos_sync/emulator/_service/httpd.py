"""The HTTP/1.1 server: werkzeug's threaded server and request handler, kept alive.

werkzeug's ``WSGIRequestHandler.run_wsgi`` serves each request: the WSGI call,
chunked answers flushed chunk by chunk, ``Expect: 100-continue``, de-chunked
uploads, a client gone mid-answer. The handler adds, through its overridable
methods, only what werkzeug does not do, each with its reason beside it. The
main one is keep-alive: werkzeug closes every connection, as it cannot tell
where a request's body ends, while clients of the real service reuse theirs.
So the app reads a body bounded by its length (``_Body``), what it left is
drained before the answer's head (or the connection closes), and werkzeug's
``Connection: close`` is dropped when the connection can carry another request.
Open connections are tracked, so that ``close`` can cut them, and counted, so
that tests and benchmarks see whether clients reuse them.

One werkzeug detail no overridable method reaches: after an answer, ``run_wsgi``
discards what it can read from ``self.rfile``, on a kept-alive connection the
next request; ``make_environ`` leaves it an empty stream. pyproject bounds
werkzeug below its next minor release and ``tests/emulator/test_httpd.py``
checks the seam: raising the bound is deliberate.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import ssl
import threading
from typing import TYPE_CHECKING, Any, ClassVar

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server
from werkzeug.wsgi import ClosingIterator

if TYPE_CHECKING:
    from collections.abc import Iterable

    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

log = logging.getLogger("createos_sync.emulator")

IDLE_TIMEOUT = 60.0
DRAIN_LIMIT = 4 << 20


class _Body(io.RawIOBase):
    """The request body, limited to its length, remembering whether it was all read."""

    def __init__(self, stream: Any, length: int | None) -> None:
        self._stream = stream
        self._left = length  # None: chunked, ends when the stream says so
        self.finished = length == 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.finished:
            return 0
        size = len(buffer) if self._left is None else min(len(buffer), self._left)
        data = self._stream.read(size)
        if not data:
            if self._left:
                raise ConnectionError("request body ended early")
            self.finished = True
            return 0
        buffer[: len(data)] = data
        if self._left is not None:
            self._left -= len(data)
            self.finished = self._left == 0
        return len(data)

    def drain(self) -> bool:
        """Read and discard what the app left; False if more than DRAIN_LIMIT remains."""
        total = 0
        while not self.finished and total <= DRAIN_LIMIT:
            total += len(self.read(64 << 10))
        return self.finished


class _BadLength(Exception):
    """A request whose Content-Length is not a number: its body's end is unknown."""


class Connections:
    """The sockets of the requests being served or kept alive."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self.accepted = 0

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.add(sock)
            self.accepted += 1

    def discard(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.discard(sock)

    def cut_all(self) -> None:
        with self._lock:
            every = list(self._open)
        for sock in every:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class _Handler(WSGIRequestHandler):
    connections: ClassVar[Connections]
    tls: ClassVar[ssl.SSLContext | None] = None
    _body: _Body | None = None  # the request being answered, once its environ is made
    _keep_alive = False  # decided when the answer's head goes out
    _answering = False  # the answer's head went out

    def setup(self) -> None:
        # Headers and body go out in separate writes; without this, Nagle's
        # algorithm and the client's delayed ACK add ~40 ms to every answer.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:
            self.request.settimeout(IDLE_TIMEOUT)
            self.request = self.tls.wrap_socket(
                self.request, server_side=True, do_handshake_on_connect=False
            )
        super().setup()
        self.connections.add(self.connection)

    def handle(self) -> None:
        if isinstance(self.connection, ssl.SSLSocket):
            try:
                self.connection.do_handshake()
            except OSError as exc:  # ssl.SSLError included: a client that distrusts us
                log.debug("TLS handshake failed: %s", type(exc).__name__)
                return
        super().handle()

    def finish(self) -> None:
        self.connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()
        if isinstance(self.connection, ssl.SSLSocket):
            # The server closes the socket it accepted, which wrapping detached.
            self.connection.close()

    def handle_one_request(self) -> None:
        # Waiting for the next request on a kept-alive connection may time out.
        self.connection.settimeout(IDLE_TIMEOUT)
        self._body, self._keep_alive, self._answering = None, False, False
        super().handle_one_request()

    def run_wsgi(self) -> None:
        self.connection.settimeout(None)  # inside a request, a stream may be quiet for long
        if self.request_version != "HTTP/1.1":
            self.protocol_version = "HTTP/1.0"  # werkzeug would answer it in chunks
        stream = self.rfile
        try:
            super().run_wsgi()
        except _BadLength:
            self.send_error(400, "bad Content-Length")
        except OSError:  # the connection failed mid-answer (werkzeug handles ConnectionError)
            self.close_connection = True
        except Exception:  # passthrough_errors: werkzeug would keep half an answer's connection
            log.exception("emulator request handler failed")
            self.close_connection = True
            if not self._answering:
                with contextlib.suppress(OSError):
                    self.send_error(500)
        finally:
            self.rfile = stream

    def make_environ(self) -> WSGIEnvironment:
        environ = super().make_environ()
        if environ.get("wsgi.input_terminated"):  # chunked, de-chunked by werkzeug
            length = None
        else:
            raw = environ.get("CONTENT_LENGTH") or "0"
            if not raw.isdigit():
                raise _BadLength
            length = int(raw)
        self._body = _Body(environ["wsgi.input"], length)
        environ["wsgi.input"] = self._body
        environ["wsgi.input_terminated"] = True
        # After the answer, run_wsgi discards what self.rfile still holds: on a
        # kept-alive connection that is the next request, so it finds nothing.
        self.rfile = io.BytesIO()
        return environ

    def send_response(self, code: int, message: str | None = None) -> None:
        # The head goes out: the connection stays open if the request was read whole.
        body = self._body
        drained = body is not None and body.drain()
        self._keep_alive = (
            drained and not self.close_connection and self.protocol_version >= "HTTP/1.1"
        )
        self._answering = True
        super().send_response(code, message)

    def send_header(self, keyword: str, value: str) -> None:
        if self._keep_alive and keyword.lower() == "connection" and value.lower() == "close":
            return  # werkzeug's, on every answer
        super().send_header(keyword, value)

    def connection_dropped(
        self, error: BaseException, environ: WSGIEnvironment | None = None
    ) -> None:
        self.close_connection = True

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Never log request lines: queries may carry anything."""

    def log(self, type: str, message: str, *args: Any) -> None:
        log.debug("http server %s: %s", type, message % args if args else message)


def _bodiless_head(app: WSGIApplication) -> WSGIApplication:
    """The app, its answers to HEAD without a body: werkzeug writes whatever the app yields
    (werkzeug's ``Response`` yields nothing to HEAD; a preview's refusal yields its text)."""

    def answer(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        body = app(environ, start_response)
        if environ["REQUEST_METHOD"] != "HEAD":
            return body
        return ClosingIterator((), getattr(body, "close", None))

    return answer


def serve(
    host: str, port: int, app: Any, tls: ssl.SSLContext | None = None
) -> tuple[BaseWSGIServer, Connections]:
    """A bound threaded server (not yet serving) and its connection registry.

    With ``tls``, connections are HTTPS (wrapped by the handler, not by
    werkzeug, whose wrapping of the listening socket would handshake in the
    accepting thread).
    """
    registry = Connections()

    class Handler(_Handler):
        connections = registry

    Handler.tls = tls
    try:
        server = make_server(
            host,
            port,
            _bodiless_head(app),
            threaded=True,
            request_handler=Handler,
            passthrough_errors=True,  # errors are the handler's: see run_wsgi
        )
    except SystemExit:  # werkzeug exits the process when it cannot bind
        raise OSError(f"cannot listen on {host}:{port}") from None
    server.ssl_context = tls  # werkzeug: wsgi.url_scheme "https", SSL errors logged quietly
    return server, registry
