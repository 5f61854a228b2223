"""What the transport takes from the environment: proxies and CA bundle, read once at the
client's creation as requests would read them for each request; never ``~/.netrc``."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from createos_sync import Client
from createos_sync._wire.http import Environment

from .wire import BASE, KEY, Service

SHAPES = {"data": [{"id": "s-1vcpu-1gb", "vcpu": 1, "mem_mib": 1024}]}
PROXY = "http://127.0.0.1:9"
_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY", "REQUESTS_CA_BUNDLE",
              "CURL_CA_BUNDLE", "NETRC")  # fmt: skip


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def _client(**options: object) -> Client:
    return Client(KEY, BASE, requests_per_minute=10**9, **options)  # type: ignore[arg-type]


def _sent_with(service: Service, client: Client) -> dict[str, object]:
    """The settings the adapter was given for one request (``responses`` records them)."""
    service.add("GET", "/shapes", body=SHAPES)
    with client:
        client.shapes()
    return dict(service.calls()[-1].request.req_kwargs)


@pytest.mark.parametrize("entry", ["machine api.test", "default"])
def test_netrc_credentials_are_never_sent(
    service: Service, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, entry: str
) -> None:
    # requests, reading the environment, would add them as an "Authorization: Basic" header.
    netrc = tmp_path / "netrc"
    netrc.write_text(f"{entry} login someone password netrc-secret\n")
    monkeypatch.setenv("NETRC", str(netrc))
    service.add("GET", "/shapes", body=SHAPES)
    with _client() as client:
        client.shapes()
    headers = service.calls()[-1].request.headers
    assert "Authorization" not in headers
    assert headers["X-Api-Key"] == KEY


def test_the_proxy_for_the_api_host_is_used(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", PROXY)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:8")
    assert _sent_with(service, _client())["proxies"] == {
        "https": PROXY,
        "http": "http://127.0.0.1:8",
    }


@pytest.mark.parametrize("no_proxy", ["api.test", ".test", "*", "other.example,api.test"])
def test_no_proxy_exempts_the_api_host(
    service: Service, monkeypatch: pytest.MonkeyPatch, no_proxy: str
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", PROXY)
    monkeypatch.setenv("NO_PROXY", no_proxy)
    assert _sent_with(service, _client())["proxies"] == {}


def test_no_proxy_for_another_host_leaves_the_proxy(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("https_proxy", PROXY)
    monkeypatch.setenv("no_proxy", "other.example")
    assert _sent_with(service, _client())["proxies"] == {"https": PROXY, "no": "other.example"}


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"REQUESTS_CA_BUNDLE": "/ca/requests.pem"}, "/ca/requests.pem"),
        ({"CURL_CA_BUNDLE": "/ca/curl.pem"}, "/ca/curl.pem"),
        ({"REQUESTS_CA_BUNDLE": "/ca/requests.pem", "CURL_CA_BUNDLE": "/ca/curl.pem"},
         "/ca/requests.pem"),
        ({}, True),
    ],
)  # fmt: skip
def test_the_ca_bundle_variables_are_honoured(
    service: Service,
    monkeypatch: pytest.MonkeyPatch,
    variables: dict[str, str],
    expected: object,
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert _sent_with(service, _client())["verify"] == expected


def test_the_clients_own_ca_bundle_wins_over_the_environments(
    service: Service, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/ca/requests.pem")
    pinned = tmp_path / "ca.pem"
    pinned.write_text("")
    assert _sent_with(service, _client(ca_bundle=pinned))["verify"] == str(pinned)


def test_the_environment_is_read_when_the_client_is_created(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", PROXY)
    client = _client()
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:7")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/ca/later.pem")
    sent = _sent_with(service, client)
    assert sent["proxies"] == {"https": PROXY}
    assert sent["verify"] is True


def test_a_given_session_reads_the_environment_itself_for_each_request(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = _client(session=requests.Session())
    monkeypatch.setenv("HTTPS_PROXY", PROXY)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/ca/later.pem")
    sent = _sent_with(service, client)
    assert sent["proxies"] == {"https": PROXY}
    assert sent["verify"] == "/ca/later.pem"


class _Proxy(http.server.BaseHTTPRequestHandler):
    """A forward proxy that answers every request itself, noting the target it was asked for."""

    targets: list[str]

    def do_GET(self) -> None:
        self.targets.append(self.path)
        body = json.dumps({"status": "success", **SHAPES}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def proxy() -> Iterator[tuple[str, list[str]]]:
    targets: list[str] = []
    handler = type("Proxy", (_Proxy,), {"targets": targets})
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.server_address[1]}", targets
        server.shutdown()
        thread.join()


def test_requests_go_through_the_proxy_over_real_sockets(
    proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    address, targets = proxy
    monkeypatch.setenv("HTTP_PROXY", address)
    # Port 9 (discard) is never listened on here: only the proxy can answer.
    with Client(KEY, "http://127.0.0.1:9", requests_per_minute=10**9, max_retries=0) as client:
        assert [s.id for s in client.shapes()] == ["s-1vcpu-1gb"]
    assert targets == ["http://127.0.0.1:9/v1/shapes"]


def test_the_environments_repr_never_shows_a_proxys_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://user:proxy-secret@127.0.0.1:9")
    environment = Environment.read("https://api.test/v1")
    assert environment.proxies == {"https": "http://user:proxy-secret@127.0.0.1:9"}
    assert "proxy-secret" not in repr(environment)
