"""Preview URLs: an origin per sandbox port, or one path prefix where names cannot resolve.

On the service each sandbox has a host of its own, so one sandbox's app
cannot read another's pages or cookies. The emulator's ``host`` form does
the same on loopback::

    http://<port>-<sandbox id>.sb.localhost:PORT/

Browsers send every ``*.localhost`` name to loopback (RFC 6761), and the
proxy routes by ``Host``: each sandbox port is an origin of its own, none is
the API's. Python's resolver answers such names only where the system's
does (systemd-resolved, nss-myhostname): elsewhere ``session()`` gives a
``requests`` session that connects them to the emulator as a browser would.

The ``path`` form, ``http://127.0.0.1:PORT/_ingress/<sandbox id>/<port>/``,
works for every client, but all previews then share the API's origin.
``auto`` chooses the host form where this machine's resolver answers
``*.localhost`` by itself, without asking a DNS server, else the path form.

Cookies (``scoped_cookie``): ``sb.localhost`` is no public suffix, so a
browser would take ``Domain=sb.localhost`` from one preview and send it to
every other one; the proxy drops every ``Domain`` attribute of a preview's
``Set-Cookie``, so that a cookie its server sets is its host's alone. In the
path form it also puts the cookie's ``Path`` under the preview's prefix, so
that it is sent to that preview's pages alone (not to another preview's, nor
to the API). What neither form can stop: a script in a page setting
``document.cookie`` itself (the host form: for ``sb.localhost``, which other
previews then receive; the path form: anything, its pages sharing one
origin with every other preview's). The host form keeps pages apart; the
path form keeps only cookie jars apart.
"""

from __future__ import annotations

import logging
import re
import secrets
import socket
import sys
from pathlib import Path
from typing import Any

import requests
import urllib3
from requests.adapters import HTTPAdapter

log = logging.getLogger("createos_sync.emulator")

MODES = ("auto", "host", "path")
PREFIX = "/_ingress/"
# Under "sb.localhost", not "localhost" itself: TLS refuses a wildcard over one label.
HOST_FORM = re.compile(r"([0-9]{1,5})-([a-z0-9][a-z0-9-]{0,62})\.sb\.localhost(?::[0-9]{1,5})?\Z")
SANDBOX_PLACEHOLDER = "<sandbox id>"
HOST_FORM_ADDRESSES = ("127.0.0.1", "localhost")  # where *.localhost names lead
# systemd-resolved's stub answers *.localhost itself: so does a resolver that asks it.
RESOLVED_STUB = "nameserver 127.0.0.53"


def check(mode: str, host: str) -> None:
    """Refuse a ``previews`` mode that cannot work for an emulator listening at ``host``."""
    if mode not in MODES:
        raise ValueError(f"previews must be 'auto', 'host' or 'path', not {mode!r}")
    if mode == "host" and host not in HOST_FORM_ADDRESSES:
        raise ValueError("previews='host' needs the emulator on 127.0.0.1 (where *.localhost goes)")


def choose(mode: str, host: str) -> str:
    """ "host" or "path" for ``mode`` on an emulator listening at ``host``."""
    if mode != "auto":
        return mode
    if host in HOST_FORM_ADDRESSES and resolves_localhost_names():
        return "host"
    log.info(
        "preview URLs use one path prefix on the emulator's origin: this machine's resolver "
        "does not answer *.localhost names by itself; previews='host' gives each sandbox "
        "port an origin of its own (browsers resolve them; emu.preview_session() too)"
    )
    return "path"


def template(url: str, mode: str) -> str:
    """The ``ingress_url_template`` of every sandbox, ``<sandbox id>`` still to be filled in."""
    if mode == "host":
        scheme, _, address = url.partition("://")
        port = address.rsplit(":", 1)[1]
        return f"{scheme}://<port>-{SANDBOX_PLACEHOLDER}.sb.localhost:{port}/"
    return f"{url}{PREFIX}{SANDBOX_PLACEHOLDER}/<port>/"


def host_form(environ: dict[str, Any]) -> tuple[str, int] | None:
    """(sandbox id, port) when the request's ``Host`` names a preview, else None."""
    match = HOST_FORM.match(str(environ.get("HTTP_HOST", "")).lower())
    if match is None or not 1 <= int(match.group(1)) <= 65535:
        return None
    return match.group(2), int(match.group(1))


def scoped_cookie(value: str, prefix: str) -> str:
    """A ``Set-Cookie`` value kept to the preview that sent it: no ``Domain`` (the cookie is
    its host's alone), and under ``prefix`` (the path form's, "" in the host form) a
    ``Path`` inside it: ``Path=/app`` becomes ``Path=<prefix>/app``, none ``<prefix>/``."""
    pair, *attributes = value.split(";")
    kept, path = [pair.strip()], None
    for attribute in attributes:
        name, _, given = attribute.strip().partition("=")
        if name.strip().lower() == "domain":
            continue
        if name.strip().lower() == "path":
            path = given.strip()
            continue
        kept.append(attribute.strip())
    if prefix:
        path = prefix + (path if path and path.startswith("/") else "/")
    if path is not None:
        kept.append(f"Path={path}")
    return "; ".join(kept)


def resolves_localhost_names() -> bool:
    """Whether ``*.localhost`` resolves to loopback here with no query off this machine."""
    if not sys.platform.startswith("linux"):
        return False
    sources = _hosts_sources()
    before_dns = sources[: sources.index("dns")] if "dns" in sources else sources
    local = any(s.startswith(("myhostname", "resolve")) for s in before_dns)
    if not local and "dns" in sources:
        servers = _lines("/etc/resolv.conf", "nameserver")
        local = bool(servers) and all(s.split()[:2] == RESOLVED_STUB.split() for s in servers)
    if not local:
        return False
    try:
        found = socket.getaddrinfo(f"probe-{secrets.token_hex(4)}.sb.localhost", None)
    except OSError:
        return False
    return bool(found) and all(a[4][0] in ("127.0.0.1", "::1") for a in found)


def _hosts_sources() -> list[str]:
    for line in _lines("/etc/nsswitch.conf", "hosts:"):
        return [word for word in line.split()[1:] if not word.startswith("[")]
    return ["files", "dns"]


def _lines(path: str, start: str) -> list[str]:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return []
    return [line.strip() for line in text.splitlines() if line.strip().startswith(start)]


def session(host: str = "127.0.0.1", ca_path: str | None = None) -> requests.Session:
    """A ``requests`` session that reaches ``*.localhost`` names at ``host``, as a browser
    does: each preview keeps its own origin (its own cookies), whatever this resolver says.
    Other names are resolved as usual: it works for the service's preview URLs too."""
    web = requests.Session()
    adapter = _LocalhostAdapter(host)
    web.mount("http://", adapter)
    web.mount("https://", adapter)
    if ca_path is not None:
        web.verify = ca_path
        web.trust_env = False  # else REQUESTS_CA_BUNDLE would replace it
    return web


class _LocalhostAdapter(HTTPAdapter):
    def __init__(self, host: str) -> None:
        self._loopback = host
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        loopback = self._loopback

        class Connection(urllib3.connection.HTTPConnection):
            def _new_conn(self) -> socket.socket:
                return _connect(self, loopback, urllib3.connection.HTTPConnection._new_conn)

        class TlsConnection(urllib3.connection.HTTPSConnection):
            def _new_conn(self) -> socket.socket:
                return _connect(self, loopback, urllib3.connection.HTTPSConnection._new_conn)

        class Pool(urllib3.HTTPConnectionPool):
            ConnectionCls = Connection

        class TlsPool(urllib3.HTTPSConnectionPool):
            ConnectionCls = TlsConnection

        self.poolmanager.pool_classes_by_scheme = {"http": Pool, "https": TlsPool}


def _connect(conn: Any, loopback: str, new_conn: Any) -> socket.socket:
    """Open the connection at ``loopback`` when its name is under ``localhost``; the name
    itself still goes in ``Host`` and in TLS."""
    name = conn._dns_host
    if name.lower().endswith(".localhost"):
        conn._dns_host = loopback
    try:
        sock: socket.socket = new_conn(conn)
    finally:
        conn._dns_host = name
    return sock
