"""PATCH, the ingress URL template, and the reverse proxy behind preview URLs."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from createos_sync.emulator import Emulator

from ..ports import free_port
from ..waiting import wait_until
from .helpers import Api

# A server for the sandbox: binds the port in argv (default: a free one) and writes it to
# /workspace/port.
#   GET /headers   -> the request's path and headers, as JSON
#   POST /echo     -> the request body back (chunked or sized bodies alike)
#   GET /redirect  -> 302 to the root-absolute /target
#   GET /stream    -> "first", then, once /workspace/go exists, "second" (body until close)
#   Upgrade: echo  -> 101, then every byte back until the client closes
SERVER = r"""
import json, os, socket, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.headers.get("Upgrade") == "echo":
            self.wfile.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\n"
                             b"Connection: Upgrade\r\n\r\n")
            self.wfile.flush()
            while data := self.connection.recv(65536):
                self.connection.sendall(data)
            self.close_connection = True
            return
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/target")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/stream":
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"first\n")
            self.wfile.flush()
            while not os.path.exists("go"):
                time.sleep(0.02)
            self.wfile.write(b"second\n")
            return
        body = json.dumps({"path": self.path, "headers": dict(self.headers)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        if self.headers.get("Transfer-Encoding") == "chunked":
            body = b""
            while size := int(self.rfile.readline().strip(), 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
with open("port.tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename("port.tmp", "port")
server.serve_forever()
"""


def serve(api: Api, sandbox_id: str, port: int = 0) -> int:
    """Start SERVER in the sandbox; its port once it listens."""
    api.data(
        "PUT",
        f"/v1/sandboxes/{sandbox_id}/files",
        params={"path": "/workspace/server.py"},
        data=SERVER.encode(),
    )
    api.process(sandbox_id, "python3", "server.py", str(port), cwd="/workspace")
    port_file = api.emu.sandbox_path(sandbox_id, "/workspace/port")
    wait_until(port_file.exists, what="the sandbox's server to listen")
    return int(port_file.read_text())


def preview(api: Api, sandbox_id: str, port: int) -> str:
    template: str = api.data("GET", f"/v1/sandboxes/{sandbox_id}")["ingress_url_template"]
    return template.replace("<port>", str(port))


@pytest.fixture
def served(any_api: Api) -> Iterator[tuple[Api, str, str]]:
    """(api, sandbox id, preview URL of its server) in each isolation mode."""
    sandbox_id = any_api.sandbox(ingress_enabled=True)
    port = serve(any_api, sandbox_id)
    yield any_api, sandbox_id, preview(any_api, sandbox_id, port)
    any_api.data("DELETE", f"/v1/sandboxes/{sandbox_id}")


# --- PATCH ----------------------------------------------------------------------


def test_patch_switches_ingress_and_auto_pause(api: Api) -> None:
    sandbox_id = api.sandbox()
    path = f"/v1/sandboxes/{sandbox_id}"
    record = api.data("GET", path)
    assert record["ingress_enabled"] is False and "auto_pause_after_seconds" not in record
    assert "ingress_url_template" not in record  # only while ingress is on, as on the service
    changed = api.data("PATCH", path, json={"ingress_enabled": True})
    assert changed["id"] == sandbox_id and changed["ingress_enabled"] is True
    assert changed["ingress_url_template"] == f"{api.emu.url}/_ingress/{sandbox_id}/<port>/"
    changed = api.data("PATCH", path, json={"auto_pause_after_seconds": 600})
    assert changed["auto_pause_after_seconds"] == 600 and changed["ingress_enabled"] is True
    changed = api.data("PATCH", path, json={"disable_auto_pause": True})
    assert "auto_pause_after_seconds" not in changed
    assert api.data("GET", path)["ingress_enabled"] is True


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"ingress_enabled": "yes"},
        {"auto_pause_after_seconds": 59},
        {"auto_pause_after_seconds": 86401},
        {"auto_pause_after_seconds": 600.5},
        {"auto_pause_after_seconds": 600, "disable_auto_pause": True},
        {"disable_auto_pause": 1},
    ],
)
def test_bad_patches_are_400_and_change_nothing(api: Api, body: dict[str, object]) -> None:
    sandbox_id = api.sandbox(auto_pause_after_seconds=300)
    response = api.call("PATCH", f"/v1/sandboxes/{sandbox_id}", json=body)
    assert response.status_code == 400 and response.json()["status"] == "fail"
    record = api.data("GET", f"/v1/sandboxes/{sandbox_id}")
    assert (record["auto_pause_after_seconds"], record["ingress_enabled"]) == (300, False)


def test_patching_a_destroyed_sandbox_is_404(api: Api) -> None:
    sandbox_id = api.sandbox()
    api.data("DELETE", f"/v1/sandboxes/{sandbox_id}")
    response = api.call("PATCH", f"/v1/sandboxes/{sandbox_id}", json={"ingress_enabled": True})
    assert response.status_code == 404


# --- the proxy ----------------------------------------------------------------------


def test_a_preview_url_reaches_the_sandboxs_server(served: tuple[Api, str, str]) -> None:
    api, sandbox_id, url = served
    api.emu.clear_request_log()
    # No API key: preview URLs are public. A key sent anyway never reaches the sandbox.
    answer = requests.get(url + "headers?x=1", headers={"X-Api-Key": api.emu.api_key}, timeout=10)
    assert answer.status_code == 200, answer.text
    seen = answer.json()
    assert seen["path"] == "/headers?x=1"
    headers = {k.lower(): v for k, v in seen["headers"].items()}
    assert "x-api-key" not in headers
    assert headers["x-forwarded-prefix"] == f"/_ingress/{sandbox_id}/{url.split('/')[-2]}"
    assert headers["host"] == url.split("/")[2]  # the address the client used
    assert api.emu.request_log == []  # not API traffic: not logged, not rate limited


def test_bodies_stream_both_ways(served: tuple[Api, str, str]) -> None:
    api, sandbox_id, url = served
    payload = bytes(range(256)) * 4096  # 1 MiB
    sized = requests.post(url + "echo", data=payload, timeout=10)
    assert sized.status_code == 200 and sized.content == payload
    chunked = requests.post(url + "echo", data=iter([payload[:1000], payload[1000:]]), timeout=10)
    assert chunked.status_code == 200 and chunked.content == payload

    with requests.get(url + "stream", stream=True, timeout=10) as streamed:
        lines = streamed.iter_lines()
        # The second line is written only after this one arrived: a buffering proxy times out.
        assert next(lines) == b"first"
        api.data(
            "PUT", f"/v1/sandboxes/{sandbox_id}/files", params={"path": "/workspace/go"}, data=b""
        )
        assert next(lines) == b"second"


def test_redirects_stay_under_the_prefix(served: tuple[Api, str, str]) -> None:
    _, _, url = served
    answer = requests.get(url + "redirect", allow_redirects=False, timeout=10)
    assert answer.status_code == 302
    assert answer.headers["Location"] == url.split(url.split("/")[2])[1] + "target"
    bare = requests.get(url.rstrip("/"), allow_redirects=False, timeout=10)
    assert bare.status_code == 308 and bare.headers["Location"].endswith(url.split("/", 3)[3])


def test_an_upgrade_becomes_a_tunnel(served: tuple[Api, str, str]) -> None:
    _, _, url = served
    host, port = url.split("/")[2].rsplit(":", 1)
    path = "/" + url.split("/", 3)[3]
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: Upgrade\r\n"
            "Upgrade: echo\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(1024)
        assert head.startswith(b"HTTP/1.1 101")
        for message in (b"hello", b"\x00\xff binary \r\n\r\n"):
            sock.sendall(message)
            echoed = b""
            while len(echoed) < len(message):
                echoed += sock.recv(1024)
            assert echoed == message


def test_ingress_off_unknown_paused_and_unlistened_are_refused(any_api: Api) -> None:
    api = any_api
    sandbox_id = api.sandbox(ingress_enabled=True)
    port = serve(api, sandbox_id)
    url = preview(api, sandbox_id, port)
    assert requests.get(url + "headers", timeout=10).status_code == 200

    api.data("PATCH", f"/v1/sandboxes/{sandbox_id}", json={"ingress_enabled": False})
    off = requests.get(url + "headers", timeout=10)
    assert off.status_code == 403 and "ingress is disabled" in off.text
    api.data("PATCH", f"/v1/sandboxes/{sandbox_id}", json={"ingress_enabled": True})

    unused = free_port()
    nothing = requests.get(preview(api, sandbox_id, unused), timeout=10)
    assert nothing.status_code == 502 and f"nothing listens on port {unused}" in nothing.text

    api.data("POST", f"/v1/sandboxes/{sandbox_id}/pause")
    api.wait_status(sandbox_id, "paused")
    assert requests.get(url + "headers", timeout=10).status_code == 503

    api.data("DELETE", f"/v1/sandboxes/{sandbox_id}")
    assert requests.get(url + "headers", timeout=10).status_code == 404
    for junk in ("/_ingress/", "/_ingress/sb-x/", "/_ingress/sb-x/0/", "/_ingress/sb-x/99999/"):
        assert requests.get(api.emu.url + junk, timeout=10).status_code == 404


def not_theirs(emu: Emulator, sandbox_id: str, port: int) -> str:
    """The refusal of a port that another sandbox (or the host) listens on."""
    if emu.network == "private":  # the sandbox's own namespace: nothing is there at all
        return f"nothing listens on port {port} in sandbox {sandbox_id}"
    return f"port {port} is not sandbox {sandbox_id}'s alone"


class _HostHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"host")

    def log_message(self, *args: object) -> None:
        pass


def test_only_the_sandboxs_own_listener_is_reached(emu: Emulator, api: Api) -> None:
    owner = api.sandbox(ingress_enabled=True)
    other = api.sandbox(ingress_enabled=True)
    port = serve(api, owner)
    assert requests.get(preview(api, owner, port) + "headers", timeout=10).status_code == 200
    stranger = requests.get(preview(api, other, port) + "headers", timeout=10)
    assert stranger.status_code == 502 and not_theirs(emu, other, port) in stranger.text

    host_server = ThreadingHTTPServer(("127.0.0.1", 0), _HostHandler)
    threading.Thread(target=host_server.serve_forever, daemon=True).start()
    try:
        host_port = host_server.server_address[1]
        answer = requests.get(preview(api, owner, host_port), timeout=10)
        assert answer.status_code == 502 and answer.text != "host"
        emulator_port = int(emu.url.rsplit(":", 1)[1])  # nor the emulator itself
        assert requests.get(preview(api, owner, emulator_port), timeout=10).status_code == 502
    finally:
        host_server.shutdown()
        host_server.server_close()


def test_a_port_that_changes_hands_is_checked_again(api: Api) -> None:
    first = api.sandbox(ingress_enabled=True)
    second = api.sandbox(ingress_enabled=True)
    port = serve(api, first)
    url = preview(api, first, port)
    assert requests.get(url + "headers", timeout=10).status_code == 200  # owner remembered
    [server] = api.data("GET", f"/v1/sandboxes/{first}/processes")["processes"]
    api.data("DELETE", api.proc_path(first, server["process_id"]), params={"grace_ms": 0})
    serve(api, second, port)  # the same port, now the other sandbox's
    assert requests.get(preview(api, second, port) + "headers", timeout=10).status_code == 200
    stale = requests.get(url + "headers", timeout=10)
    assert stale.status_code == 502 and not_theirs(api.emu, first, port) in stale.text


def test_an_open_exchange_keeps_the_sandbox_awake(emu: Emulator, api: Api) -> None:
    sandbox_id = api.sandbox(ingress_enabled=True)
    url = preview(api, sandbox_id, serve(api, sandbox_id))
    # Through the API the minimum is 60 s; the store takes any idle limit.
    store = emu._require_store()
    with requests.get(url + "stream", stream=True, timeout=10) as streamed:
        lines = streamed.iter_lines()  # kept: a dropped iterator closes the connection
        assert next(lines) == b"first"
        store.configure(sandbox_id, auto_pause_after_seconds=1)
        for _ in range(6):  # several auto-pause ticks, each finding it busy
            assert store.get(sandbox_id).settle() == "running"
            time.sleep(0.5)
    # The client hung up while the server stayed silent: the exchange ends, the sandbox idles.
    wait_until(lambda: store.get(sandbox_id).settle() == "paused", what="auto-pause")


def test_auto_pause_follows_its_setting_as_patched(emu: Emulator, api: Api) -> None:
    sandbox_id = api.sandbox(auto_pause_after_seconds=600)
    store = emu._require_store()
    store.configure(sandbox_id, auto_pause_after_seconds=0)  # below the API's minimum of 60
    wait_until(lambda: api.status(sandbox_id) == "paused", what="auto-pause")
    patched = api.data("PATCH", f"/v1/sandboxes/{sandbox_id}", json={"disable_auto_pause": True})
    assert "auto_pause_after_seconds" not in patched  # omitted once disabled
    api.data("POST", f"/v1/sandboxes/{sandbox_id}/resume")
    api.wait_status(sandbox_id, "running")
    time.sleep(1.5)  # more than one tick of the auto-pause ticker
    assert api.status(sandbox_id) == "running"
