"""The HTTP/1.1 server: werkzeug's threaded dev server with keep-alive put back.

werkzeug 3 answers every request with ``Connection: close`` (its handler
cannot tell where a request body ends). Clients of the real service keep
connections alive, and the SDK's connection pooling should be exercised the
same way, so this handler reimplements ``run_wsgi``: it knows how much of the
body the app consumed, drains the rest (or closes when that is too much),
flushes every chunk of a streamed response at once, and never logs request
lines. Open connections are tracked so that ``close`` can cut them, and
counted, so that tests and benchmarks can see whether clients reuse them.

With a TLS context, each accepted socket is wrapped in the handler's own
thread and the handshake happens there too: the accepting thread never
waits on a slow (or silent) client's handshake.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import ssl
import threading
from collections.abc import Iterable
from typing import Any, ClassVar

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

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
    protocol_version = "HTTP/1.1"
    connections: ClassVar[Connections]
    tls: ClassVar[ssl.SSLContext | None] = None

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
        super().handle_one_request()

    def run_wsgi(self) -> None:
        self.connection.settimeout(None)
        if self.headers.get("Expect", "").lower().strip() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        environ = self.make_environ()
        body = _request_body(environ)
        if body is None:
            self.send_error(400, "bad Content-Length")
            return
        environ["wsgi.input"] = body
        environ["wsgi.input_terminated"] = True
        state: dict[str, Any] = {"status": None, "headers": None, "sent": False, "chunked": False}

        def start_response(status: str, headers: list[tuple[str, str]], _exc: Any = None) -> Any:
            state["status"], state["headers"] = status, headers
            return write

        def write(data: bytes) -> None:
            if not state["sent"]:
                self._send_head(state, environ, body)
            if data and environ["REQUEST_METHOD"] != "HEAD":
                if state["chunked"]:
                    data = b"%x\r\n%s\r\n" % (len(data), data)
                self.wfile.write(data)
            self.wfile.flush()

        try:
            app_iter: Iterable[bytes] = self.server.app(environ, start_response)
            try:
                for chunk in app_iter:
                    write(chunk)
                if not state["sent"]:
                    write(b"")
                if state["chunked"]:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
            finally:
                close = getattr(app_iter, "close", None)
                if close is not None:
                    close()
        except (ConnectionError, TimeoutError, OSError):
            self.close_connection = True
        except Exception:
            log.exception("emulator request handler failed")
            self.close_connection = True
            if not state["sent"]:
                self.send_error(500)

    def _send_head(self, state: dict[str, Any], environ: dict[str, Any], body: _Body) -> None:
        state["sent"] = True
        code_text, _, reason = str(state["status"]).partition(" ")
        code = int(code_text)
        if not body.drain():
            self.close_connection = True
        self.send_response(code, reason)
        names = set()
        for key, value in state["headers"]:
            self.send_header(key, value)
            names.add(key.lower())
        bodiless = environ["REQUEST_METHOD"] == "HEAD" or code < 200 or code in (204, 304)
        if "content-length" not in names and not bodiless:
            if self.request_version == "HTTP/1.1":
                state["chunked"] = True
                self.send_header("Transfer-Encoding", "chunked")
            else:  # an HTTP/1.0 client reads the body until the connection closes
                self.close_connection = True
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Never log request lines: queries may carry anything."""

    def log(self, type: str, message: str, *args: Any) -> None:
        log.debug("http server %s: %s", type, message % args if args else message)


def _request_body(environ: dict[str, Any]) -> _Body | None:
    if environ.get("wsgi.input_terminated"):  # chunked, already de-chunked by werkzeug
        return _Body(environ["wsgi.input"], None)
    raw = environ.get("CONTENT_LENGTH") or "0"
    if not raw.isdigit():
        return None
    return _Body(environ["wsgi.input"], int(raw))


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
        server = make_server(host, port, app, threaded=True, request_handler=Handler)
    except SystemExit:  # werkzeug exits the process when it cannot bind
        raise OSError(f"cannot listen on {host}:{port}") from None
    server.ssl_context = tls  # werkzeug: wsgi.url_scheme "https", SSL errors logged quietly
    return server, registry
