"""The ingress proxy: preview URLs that really reach a port inside a sandbox.

A sandbox gets, as on the service, an ``ingress_url_template`` holding a
``<port>`` placeholder: a host of its own per sandbox port on loopback, or a
path on the emulator's own address (``previews`` says which, and why)::

    http://<port>-<sandbox id>.sb.localhost:PORT/
    http://127.0.0.1:PORT/_ingress/<sandbox id>/<port>/

A request whose ``Host`` names a preview goes to that sandbox port, whatever
its path. Under the path prefix, an app that writes root-absolute links
(``/static/app.js``) must be told its base path: the proxy sends
``X-Forwarded-Prefix``, and rewrites redirects to root-absolute paths;
Jupyter (``base_url``), Streamlit (``server.baseUrlPath``) and Vite
(``base``) take one.

Requests are forwarded as they come; bodies are streamed both ways in
chunks (nothing is buffered whole, a server-sent event stream flows as it is
written), and an ``Upgrade`` request (a WebSocket) becomes a byte tunnel for
the rest of its connection. A forwarded request never carries ``X-Api-Key``:
code in a sandbox must never see the key.

Refusals are short plain text, for a browser: 404 unknown sandbox, 403
ingress disabled (or the guest agent's port), 503 sandbox not running, 502
nothing of that sandbox listens on the port (see ``_listeners`` for what "of
that sandbox" means). A sandbox with a private network (``_netns``) is
reached inside its own namespace, with a socket made there.
Proxied traffic is not API traffic: no key (preview URLs are public on the
service), no rate limit, no request log; it does count as activity for
auto-pause.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit, urlunsplit

from werkzeug.datastructures import EnvironHeaders

from .._machine import listeners as _listeners
from .._machine.listeners import Listener
from .._machine.netns import AGENT_PORT, PrivateNet
from .._wire import ApiError
from .hangups import Hangups
from .previews import PREFIX, host_form, scoped_cookie

if TYPE_CHECKING:
    from .._state.sandbox import Sandbox
    from .._state.sandboxes import SandboxStore

CHUNK = 64 * 1024
MAX_HEAD = 64 * 1024  # an upgrade's answer head, read whole to scope its cookies
CONNECT_TIMEOUT = 10.0
IDLE_TIMEOUT = 600.0  # a proxied exchange silent for this long in both directions is dropped
SANDBOX_ID = re.compile(r"[A-Za-z0-9._-]{1,128}\Z")
HOP_BY_HOP = frozenset(
    {
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
        "trailer", "trailers", "transfer-encoding", "upgrade", "expect",
    }
)  # fmt: skip
NOT_FORWARDED = frozenset(
    {"host", "content-length", "x-api-key", "forwarded", "x-forwarded-for",
     "x-forwarded-host", "x-forwarded-proto", "x-forwarded-prefix"}
)  # fmt: skip

StartResponse = Any


class Refused(Exception):
    """An answer of the proxy itself (not of the sandbox's server)."""

    def __init__(self, status: int, message: str, location: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.location = location

    def answer(self, start_response: StartResponse) -> list[bytes]:
        body = f"{self}\n".encode()
        headers = [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            ("X-Content-Type-Options", "nosniff"),  # it may quote the URL's path
        ]
        if self.location is not None:
            headers.append(("Location", self.location))
        start_response(f"{self.status} {HTTPStatus(self.status).phrase}", headers)
        return [body]


class IngressProxy:
    """The WSGI app serving every path under ``PREFIX``."""

    def __init__(self, store: SandboxStore, *, paths: bool = True) -> None:
        self._store = store
        self._paths = paths  # the path form is served (else only the host form)
        self._lock = threading.Lock()
        # (sandbox id, port) -> the listener last found to be the sandbox's own.
        self._owners: dict[tuple[str, int], _listeners.Owner] = {}
        self._hangups = Hangups()

    def claims(self, environ: dict[str, Any]) -> bool:
        """Whether a request is a preview's (its ``Host``, or its path), not the API's."""
        if host_form(environ) is not None:
            return True
        return self._paths and str(environ.get("PATH_INFO", "")).startswith(PREFIX)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        named = host_form(environ)
        try:
            if named is not None:  # the sandbox port's own origin: the whole path is the app's
                (sandbox_id, port), target, prefix = named, _target(environ, ""), ""
            else:
                sandbox_id, port, target = _split(environ)
                prefix = f"{PREFIX}{sandbox_id}/{port}"
            target = _appended(target)
            sandbox = self._sandbox(sandbox_id)
            listener = self._listener(sandbox, port)
        except Refused as refusal:
            return refusal.answer(start_response)
        exchange = _Exchange(environ, sandbox, listener, prefix, target, self._hangups)
        if _upgrading(environ):
            return exchange.tunnel(start_response)
        return exchange.forward(start_response)

    def _sandbox(self, sandbox_id: str) -> Sandbox:
        try:
            sandbox = self._store.live(sandbox_id)  # also marks it active
        except ApiError:
            raise Refused(404, f"no sandbox {sandbox_id}") from None
        if not sandbox.spec.ingress_enabled:
            raise Refused(
                403,
                f"ingress is disabled for sandbox {sandbox_id}: enable it "
                "(ingress_enabled: true at creation or in a PATCH) to reach its ports",
            )
        status = sandbox.settle()
        if status != "running":
            raise Refused(503, f"sandbox {sandbox_id} is {status}, not running")
        return sandbox

    def _listener(self, sandbox: Sandbox, port: int) -> Listener:
        net = sandbox.net
        if isinstance(net, PrivateNet):
            if port == AGENT_PORT:
                raise Refused(403, f"port {port} is the guest agent's: it has no preview URL")
            found = net.listeners(port)
            if not found:
                raise Refused(502, f"nothing listens on port {port} in sandbox {sandbox.id}")
            return found[0]  # its namespace holds its own listeners only
        if not _listeners.can_check():
            return Listener.unchecked(port)
        key = (sandbox.id, port)
        found = _listeners.listeners(port)  # each time: another listener may join the port
        if not found:
            raise Refused(502, f"nothing listens on port {port} in sandbox {sandbox.id}")
        with self._lock:
            known = self._owners.get(key)
        if known is not None and found == [known.listener] and known.still_holds():
            return known.listener
        with sandbox.lock:
            processes = list(sandbox.processes.values())
        owner = _listeners.owner(found, (pid for p in processes for pid in p.tree_pids()))
        if owner is None:
            raise Refused(
                502,
                f"port {port} is not sandbox {sandbox.id}'s alone (the emulator shares the "
                "host's network: another sandbox or a host program listens on that port)",
            )
        with self._lock:
            self._owners[key] = owner
        return owner.listener


class _Exchange:
    """One proxied request: forwarded over HTTP, or tunnelled after an Upgrade."""

    def __init__(
        self,
        environ: dict[str, Any],
        sandbox: Sandbox,
        listener: Listener,
        prefix: str,
        target: str,
        hangups: Hangups,
    ) -> None:
        self.environ = environ
        self.sandbox = sandbox
        self.listener = listener
        self.prefix = prefix
        self.target = target
        self.hangups = hangups

    def _connect(self, address: tuple[str, int], timeout: float) -> socket.socket:
        """A connection to the sandbox's port, inside its network if it has one of its own."""
        net = self.sandbox.net
        if net is None:
            return socket.create_connection(address, timeout)
        return net.create_connection(address, timeout)

    def forward(self, start_response: StartResponse) -> Iterable[bytes]:
        conn = _Upstream(self.listener.host, self.listener.port, self._connect)
        try:
            conn.connect()
            # Kept: after an answer that closes the connection, conn.sock is None.
            upstream: socket.socket = conn.sock
            upstream.settimeout(IDLE_TIMEOUT)
            self._send(conn)
            response = conn.getresponse()
        except (OSError, http.client.HTTPException, ValueError):
            conn.close()
            return Refused(502, f"the server on port {self.listener.port} did not answer").answer(
                start_response
            )
        headers = []
        # The emulator's server writes its own Date and Server: two of each would be invalid.
        dropped = HOP_BY_HOP | {"date", "server"} | _tokens(response.getheader("Connection"))
        for name, value in response.getheaders():
            if name.lower() in dropped:
                continue
            if name.lower() == "location":
                value = self._location(value)
            elif name.lower() == "set-cookie":
                value = scoped_cookie(value, self.prefix)  # this preview's alone (previews)
            headers.append((name, value))
        start_response(f"{response.status} {response.reason}", headers)
        relay = _Relay(response, conn, self.sandbox)
        client = self.environ.get("werkzeug.socket")
        if client is not None:
            self.hangups.watch(client, upstream)
            relay.on_close = lambda: self.hangups.forget(client)
        return relay

    def _send(self, conn: http.client.HTTPConnection) -> None:
        environ = self.environ
        conn.putrequest(
            environ["REQUEST_METHOD"], self.target, skip_host=True, skip_accept_encoding=True
        )
        for name, value in self._headers(upgrade=False):
            conn.putheader(name, value)
        chunked = bool(environ.get("wsgi.input_terminated"))
        length = environ.get("CONTENT_LENGTH") or ""
        if chunked:
            conn.putheader("Transfer-Encoding", "chunked")
        elif length.isdigit():
            conn.putheader("Content-Length", length)
        conn.endheaders()
        body = environ["wsgi.input"]
        while chunk := body.read(CHUNK):
            conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
        if chunked:
            conn.send(b"0\r\n\r\n")

    def _headers(self, *, upgrade: bool) -> list[tuple[str, str]]:
        environ = self.environ
        listed = _tokens(environ.get("HTTP_CONNECTION"))
        host = environ.get("HTTP_HOST") or f"127.0.0.1:{self.listener.port}"
        # The client's own Host is kept: dev servers that check Host or Origin
        # (Jupyter, Vite) then see the address the browser really used.
        headers = [("Host", host)]
        for name, value in EnvironHeaders(environ).items():
            lower = name.lower()
            if lower in HOP_BY_HOP or lower in NOT_FORWARDED or lower in listed:
                continue
            headers.append((name, value))
        if upgrade:
            headers += [("Connection", "Upgrade"), ("Upgrade", environ.get("HTTP_UPGRADE", ""))]
        headers += [
            ("X-Forwarded-For", environ.get("REMOTE_ADDR") or "127.0.0.1"),
            ("X-Forwarded-Host", host),
            ("X-Forwarded-Proto", environ.get("wsgi.url_scheme", "http")),
        ]
        if self.prefix:
            headers.append(("X-Forwarded-Prefix", self.prefix))
        return headers

    def _location(self, value: str) -> str:
        """Point a redirect that leaves the prefix back under it."""
        parts = urlsplit(value)
        if not parts.scheme and not parts.netloc:
            return self.prefix + value if value.startswith("/") else value
        host = self.environ.get("HTTP_HOST", "")
        port = self.listener.port
        ours = {host, f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
        if parts.netloc not in ours or (self.prefix and parts.path.startswith(self.prefix + "/")):
            return value
        scheme = str(self.environ.get("wsgi.url_scheme", "http"))
        path = self.prefix + (parts.path or "/")
        return urlunsplit((scheme, str(host), path, parts.query, parts.fragment))

    def tunnel(self, start_response: StartResponse) -> Iterable[bytes]:
        """Relay raw bytes both ways until either side closes, then cut the client's connection.

        The upstream's answer (101, or a refusal) reaches the client as it is.
        The connection is never reused for another request: the server's
        attempt to answer it afterwards finds it closed, which it tolerates.
        """
        client: socket.socket | None = self.environ.get("werkzeug.socket")
        try:
            upstream = self._connect((self.listener.host, self.listener.port), CONNECT_TIMEOUT)
        except OSError:
            upstream = None
        if client is None or upstream is None:
            return Refused(502, f"the server on port {self.listener.port} did not answer").answer(
                start_response
            )
        lines = [f"{self.environ['REQUEST_METHOD']} {self.target} HTTP/1.1"]
        lines += [f"{name}: {value}" for name, value in self._headers(upgrade=True)]
        with _active(self.sandbox), upstream:
            try:
                upstream.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
                head = _answer_head(upstream, self.prefix)
                if head is not None:  # else cut: no head to scope the cookies of
                    client.sendall(head)
                    _splice(client, upstream)
            finally:
                with contextlib.suppress(OSError):
                    client.shutdown(socket.SHUT_RDWR)
        start_response("502 Bad Gateway", [])  # never sent: the connection is cut
        return []


class _Upstream(http.client.HTTPConnection):
    """An HTTP connection whose socket comes from ``opener`` (inside the sandbox's network)."""

    def __init__(
        self, host: str, port: int, opener: Callable[[tuple[str, int], float], socket.socket]
    ) -> None:
        super().__init__(host, port, timeout=CONNECT_TIMEOUT)
        self._opener = opener

    def connect(self) -> None:
        self.sock = self._opener((self.host, self.port), CONNECT_TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Relay:
    """The upstream's answer body, chunk by chunk, as it arrives."""

    def __init__(
        self, response: http.client.HTTPResponse, conn: http.client.HTTPConnection, sandbox: Sandbox
    ) -> None:
        self._response = response
        self._conn = conn
        self._active = _active(sandbox)
        self._active.__enter__()
        self.on_close: Callable[[], None] | None = None

    def __iter__(self) -> Iterator[bytes]:
        while True:
            try:
                chunk = self._response.read1(CHUNK)
            except (OSError, http.client.HTTPException):
                # Raised, not returned: a clean end would tell the client the body is whole.
                raise ConnectionError("the server in the sandbox broke off its answer") from None
            if not chunk:
                return
            yield chunk

    def close(self) -> None:
        if self.on_close is not None:
            self.on_close()
        self._response.close()
        self._conn.close()
        self._active.__exit__(None, None, None)


@contextlib.contextmanager
def _active(sandbox: Sandbox) -> Iterator[None]:
    """While a proxied exchange is open, the sandbox is not idle (auto-pause)."""
    with sandbox.lock:
        sandbox.ingress_exchanges += 1
    try:
        yield
    finally:
        with sandbox.lock:
            sandbox.ingress_exchanges -= 1
            sandbox.last_active = time.monotonic()


def _splice(a: socket.socket, b: socket.socket) -> None:
    peers = {a: b, b: a}
    with selectors.DefaultSelector() as selector:
        for sock in peers:
            selector.register(sock, selectors.EVENT_READ, data=sock)
        while ready := selector.select(IDLE_TIMEOUT):
            for key, _ in ready:
                source: socket.socket = key.data
                try:
                    data = source.recv(CHUNK)
                    if not data:
                        return
                    peers[source].sendall(data)
                except OSError:
                    return


def _answer_head(upstream: socket.socket, prefix: str) -> bytes | None:
    """The upstream's answer head to an upgrade (and what followed it), its cookies scoped
    as a forwarded answer's are; None if it sends none within MAX_HEAD bytes."""
    data = b""
    upstream.settimeout(IDLE_TIMEOUT)
    try:
        while b"\r\n\r\n" not in data:
            chunk = upstream.recv(CHUNK)
            if not chunk or len(data) > MAX_HEAD:
                return None
            data += chunk
    except OSError:
        return None
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    for i, line in enumerate(lines):
        name, colon, value = line.partition(b":")
        if colon and name.strip().lower() == b"set-cookie":
            scoped = scoped_cookie(value.decode("latin-1").strip(), prefix)
            lines[i] = b"Set-Cookie: " + scoped.encode("latin-1")
    return b"\r\n".join(lines) + b"\r\n\r\n" + rest


def _target(environ: dict[str, Any], prefix: str) -> str:
    """The raw request target (under ``prefix``), rebuilt from PATH_INFO if absolute-form."""
    raw = str(environ.get("REQUEST_URI") or "")
    if not raw.startswith(prefix or "/"):
        query = environ.get("QUERY_STRING") or ""
        raw = quote(environ.get("PATH_INFO") or "", safe="/%") + (f"?{query}" if query else "")
    return raw


def _split(environ: dict[str, Any]) -> tuple[str, int, str]:
    """(sandbox id, port, target to forward) from the raw request target."""
    path, mark, query = _target(environ, PREFIX).partition("?")
    sandbox_id, _, rest = path[len(PREFIX) :].partition("/")
    port_text, slash, tail = rest.partition("/")
    port = int(port_text) if port_text.isdigit() and len(port_text) <= 5 else 0
    if not SANDBOX_ID.match(sandbox_id) or not 1 <= port <= 65535:
        raise Refused(404, "not a preview URL: expected /_ingress/<sandbox id>/<port>/")
    if not slash:  # relative links resolve against a directory: redirect to one
        location = f"{PREFIX}{sandbox_id}/{port}/" + (f"?{query}" if mark else "")
        raise Refused(308, "moved", location=location)
    return sandbox_id, port, f"/{tail}" + (f"?{query}" if mark else "")


def _appended(target: str) -> str:
    """``target`` with the slash a client doubled by appending ``/path`` to the preview URL
    taken out: the service's template has no trailing slash, the emulator's has one (the
    official TypeScript SDK's examples fetch ``${previewUrl}/items/42``)."""
    return target[1:] if target.startswith("//") else target


def _tokens(header: str | None) -> frozenset[str]:
    return frozenset(t.strip().lower() for t in (header or "").split(",") if t.strip())


def _upgrading(environ: dict[str, Any]) -> bool:
    return "upgrade" in _tokens(environ.get("HTTP_CONNECTION")) and bool(
        environ.get("HTTP_UPGRADE")
    )
