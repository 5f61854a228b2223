"""Preview URLs attacked (issue 23): one origin per sandbox port; only the sandbox's listener.

In the host form (``previews``) each sandbox port is an origin of its own,
so a browser keeps one app's cookies from another's and from the API; the
proxy routes by ``Host``. ``emu.preview_session()`` is the browser here: a
``requests`` session that reaches ``*.localhost`` names, keeping cookies per
origin. Where sandboxes share the host's network, a host service that shares
the sandbox's port (``SO_REUSEPORT``) must never receive preview traffic.
"""

from __future__ import annotations

import os
import re
import socket
import threading
from collections.abc import Callable

import pytest
import requests

import createos_sync as cs
from createos_sync.emulator import Emulator
from createos_sync.emulator._machine import listeners

from ..ports import free_port
from ..waiting import wait_until
from .helpers import Api
from .test_ingress import preview, serve

# Answers with the cookies it received; /set sets one named after argv[2] (Path=/).
COOKIE_APP = r"""
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def do_GET(self):
        body = (self.headers.get("Cookie") or "-").encode()
        self.send_response(200)
        if self.path == "/set":
            self.send_header("Set-Cookie", f"session=secret-of-{sys.argv[2]}; Path=/")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
server = HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
open(sys.argv[3] + "/listening", "w").close()
server.serve_forever()
"""
APP_PORT = 8000


def _start(box: cs.Lease, name: str, port: int) -> str:
    """Its preview URL, once the app listens (ports apart: networks may be shared)."""
    box.write_file("/workspace/app.py", COOKIE_APP)
    box.start(["python3", "/workspace/app.py", str(port), name, "/workspace"])
    box.wait_for_port(port, timeout=30)
    return box.preview_url(port)


def test_each_sandbox_port_is_an_origin_of_its_own(make_emu: Callable[..., Emulator]) -> None:
    emu = make_emu(previews="host")
    assert emu.previews == "host"
    with (
        emu.client() as client,
        cs.lease(client=client, ingress=True) as a,
        cs.lease(client=client, ingress=True) as b,
        emu.preview_session() as browser,
    ):
        url_a, url_b = _start(a, "A", APP_PORT), _start(b, "B", APP_PORT + 1)
        port = emu.url.rsplit(":", 1)[1]
        assert re.fullmatch(rf"http://{APP_PORT}-sb-[0-9a-f]+\.sb\.localhost:{port}/", url_a)
        assert browser.get(url_a + "set", timeout=10).text == "-"
        assert browser.get(url_b, timeout=10).text == "-"  # A's cookie stays A's
        assert browser.get(url_a, timeout=10).text == "session=secret-of-A"
        browser.get(url_b + "set", timeout=10)
        assert browser.get(url_a, timeout=10).text == "session=secret-of-A"
        assert browser.get(url_b, timeout=10).text == "session=secret-of-B"
        api = browser.get(emu.url + "/healthz", timeout=10)
        assert api.ok and "Cookie" not in api.request.headers  # the API's origin


def test_the_host_form_forwards_whole_paths_and_keeps_redirects_on_its_origin(
    make_emu: Callable[..., Emulator],
) -> None:
    api = Api(make_emu(previews="host"))
    sandbox_id = api.sandbox(ingress_enabled=True)
    url = preview(api, sandbox_id, serve(api, sandbox_id))
    with api.emu.preview_session() as browser:
        seen = browser.get(url + "headers?x=1", timeout=10).json()
        assert seen["path"] == "/headers?x=1"
        assert seen["headers"]["Host"] == url.split("/")[2]
        assert "X-Forwarded-Prefix" not in seen["headers"]
        moved = browser.get(url + "redirect", timeout=10, allow_redirects=False)
        assert moved.status_code == 302 and moved.headers["Location"] == "/target"
        # The path form is not served beside it: it would share the API's origin.
        path_form = f"{api.emu.url}/_ingress/{sandbox_id}/8000/"
        assert browser.get(path_form, timeout=10).status_code == 404
        # An unknown sandbox host is refused by the proxy, never answered by the API.
        stranger = url.replace(sandbox_id, "sb-0000000000000000")
        refused = browser.get(stranger + "v1/sandboxes", timeout=10)
        assert refused.status_code == 404 and "no sandbox" in refused.text


# Listens on argv[1] with SO_REUSEPORT, answers "sandbox" to every request.
REUSEPORT_SERVER = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
open(sys.argv[2] + "/listening", "w").close()
while True:
    c, _ = s.accept()
    c.recv(65536)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nsandbox")
    c.close()
"""


HOST_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nhost"


def _host_service(port: int) -> tuple[socket.socket, list[int]]:
    """A host service on ``port`` that shares it (SO_REUSEPORT); it counts what it gets."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    received = [0]

    def answer() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                received[0] += 1
                conn.sendall(HOST_ANSWER)

    threading.Thread(target=answer, daemon=True).start()
    return sock, received


def test_a_host_service_sharing_the_port_gets_no_preview_traffic(
    make_emu: Callable[..., Emulator],
) -> None:
    api = Api(make_emu(network="shared"))
    port = free_port()  # a free port for both
    sandbox_id = api.sandbox(ingress_enabled=True)
    files = f"/v1/sandboxes/{sandbox_id}/files"
    api.data("PUT", files, params={"path": "/workspace/s.py"}, data=REUSEPORT_SERVER.encode())
    api.process(sandbox_id, "python3", "/workspace/s.py", str(port), "/workspace")
    wait_until(api.emu.sandbox_path(sandbox_id, "/workspace/listening").exists,
               what="the sandbox's server")  # fmt: skip
    url = preview(api, sandbox_id, port)
    assert requests.get(url, timeout=10).text == "sandbox"  # its own port is reached
    host, received = _host_service(port)
    try:
        answers = [requests.get(url, timeout=10) for _ in range(24)]
        assert {a.status_code for a in answers} == {502} and received == [0]
        assert "not sandbox" in answers[0].text
    finally:
        host.shutdown(socket.SHUT_RDWR)  # wakes its accept(), which holds the socket open
        host.close()
    assert requests.get(url, timeout=10).text == "sandbox"  # alone again


@pytest.mark.parametrize("mode", ["path", "host"])
def test_previews_mode_is_checked(make_emu: Callable[..., Emulator], mode: str) -> None:
    with pytest.raises(ValueError, match="previews"):
        Emulator(previews="hosts")
    with pytest.raises(ValueError, match="needs the emulator on 127"):
        Emulator(host="::1", previews="host")
    assert make_emu(previews=mode).previews == mode


def _one_port_on_both_loopbacks() -> tuple[socket.socket, socket.socket]:
    """Sockets bound to ::1 and 127.0.0.1 on one port, which no other process holds on either."""
    for _ in range(50):  # another test's listener may hold the IPv6 socket's port on IPv4
        six, four = socket.socket(socket.AF_INET6), socket.socket()
        try:
            six.bind(("::1", 0))
            four.bind(("127.0.0.1", six.getsockname()[1]))
        except OSError:
            six.close()
            four.close()
            continue
        return six, four
    raise AssertionError("no port free on both loopbacks in 50 tries")


def test_listeners_are_the_same_from_sock_diag_and_from_proc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not listeners.can_check():
        pytest.skip("no /proc/net here")
    six, four = _one_port_on_both_loopbacks()
    with six, four:
        six.listen()
        four.listen()
        port = six.getsockname()[1]
        asked = listeners.listeners(port)

        def unavailable() -> list[listeners.Listener]:
            raise OSError("no sock_diag")

        monkeypatch.setattr(listeners, "_diagnosed", unavailable)
        read = listeners.listeners(port)
        inodes = {os.readlink(f"/proc/self/fd/{s.fileno()}") for s in (six, four)}
    assert sorted(asked, key=str) == sorted(read, key=str) and len(read) == 2
    assert {f"socket:[{found.inode}]" for found in read} == inodes


def test_previews_of_an_https_emulator_have_their_own_certified_origins(
    make_emu: Callable[..., Emulator],
) -> None:
    emu = make_emu(tls=True, previews="host")
    with (
        emu.client() as client,
        cs.lease(client=client, ingress=True) as box,
        emu.preview_session() as browser,
    ):
        url = _start(box, "A", APP_PORT)
        assert url.startswith("https://") and ".sb.localhost:" in url
        assert browser.get(url + "set", timeout=10).ok  # the certificate names it
        assert browser.get(url, timeout=10).text == "session=secret-of-A"
