"""Routing, authentication, JSend envelopes, rate limiting and the request log."""

from __future__ import annotations

import http.client
from collections.abc import Callable

import pytest
import requests

from createos_sync.emulator import Emulator, Fault

from .helpers import Api

PUBLISHED_SHAPES = [
    "s-1vcpu-256mb",
    "s-0.25vcpu-512mb",
    "s-0.5vcpu-1gb",
    "s-1vcpu-1gb",
    "s-1vcpu-2gb",
    "s-2vcpu-2gb",
    "s-2vcpu-4gb",
    "s-4vcpu-4gb",
    "s-4vcpu-8gb",
    "s-8vcpu-8gb",
    "s-8vcpu-16gb",
]


def test_catalog_and_health_need_no_key(emu: Emulator) -> None:
    health = requests.get(emu.url + "/healthz", timeout=10)
    assert health.status_code == 200
    assert health.json()["status"] == "success"
    shapes = requests.get(emu.url + "/v1/shapes", timeout=10).json()["data"]
    assert [s["id"] for s in shapes["data"]] == PUBLISHED_SHAPES
    assert shapes["pagination"]["total"] == len(PUBLISHED_SHAPES)
    assert set(shapes["data"][0]) == {"id", "vcpu", "mem_mib", "default_disk_mib", "cpu_quota_pct"}
    rootfs = requests.get(emu.url + "/v1/rootfs", timeout=10).json()["data"]
    assert rootfs["default"] in rootfs["rootfs"]
    assert {e["name"] for e in rootfs["entries"]} == set(rootfs["rootfs"])


@pytest.mark.parametrize("key", [None, "wrong", ""])
def test_everything_else_needs_the_key(emu: Emulator, key: str | None) -> None:
    headers = {} if key is None else {"X-Api-Key": key}
    for method, path in [
        ("GET", "/v1/sandboxes"),
        ("POST", "/v1/sandboxes"),
        ("GET", "/_emulator/state"),
    ]:
        response = requests.request(method, emu.url + path, headers=headers, timeout=10)
        assert response.status_code == 401
        assert response.json() == {
            "status": "fail",
            "data": "missing or invalid API key",  # the TS SDK reads data, ours message
            "message": "missing or invalid API key",
            "code": 401,
        }


def test_failure_envelopes(api: Api) -> None:
    missing = api.call("GET", "/v1/sandboxes/sb-nope")
    assert missing.status_code == 404
    assert missing.headers["X-Request-Id"].startswith("req-")
    assert missing.json()["status"] == "fail"
    assert missing.json()["code"] == 404
    bad_json = api.call("POST", "/v1/sandboxes", data=b"{not json")
    assert bad_json.status_code == 400
    assert bad_json.json()["status"] == "fail"
    api.emu.faults.add(Fault("sandbox.list", status=503))
    server_error = api.call("GET", "/v1/sandboxes")
    assert server_error.status_code == 503
    assert server_error.json() == {"status": "error", "message": "scripted fault", "code": 503}
    assert api.call("PATCH", "/v1/sandboxes").status_code == 405
    assert api.call("GET", "/v2/nothing").status_code == 404


def test_trailing_slash_is_not_redirected(api: Api) -> None:
    response = api.call("GET", "/v1/sandboxes/", allow_redirects=False)
    assert response.status_code == 200


def test_rate_limit_answers_429_with_retry_after(make_emu: Callable[..., Emulator]) -> None:
    emu = make_emu(rate_limit=5)
    api = Api(emu)
    for _ in range(5):
        assert api.call("GET", "/healthz").status_code == 200
    refused = api.call("GET", "/v1/shapes")
    assert refused.status_code == 429
    assert refused.json()["status"] == "fail"
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert api.call("GET", "/_emulator/state").status_code == 200  # admin is exempt


def test_request_log_has_paths_without_query_and_never_the_key(api: Api) -> None:
    api.emu.clear_request_log()
    api.call("GET", "/v1/sandboxes", params={"limit": 3, "api_key": api.emu.api_key})
    api.call("GET", "/v1/shapes")
    api.call("GET", "/_emulator/state")
    log = api.emu.request_log
    assert [(r.method, r.path, r.operation, r.status) for r in log] == [
        ("GET", "/v1/sandboxes", "sandbox.list", 200),
        ("GET", "/v1/shapes", "shapes", 200),
    ]
    assert api.emu.api_key not in repr(log)
    assert api.data("GET", "/_emulator/requests")[0]["path"] == "/v1/sandboxes"


def test_connections_are_kept_alive(emu: Emulator) -> None:
    host, port = emu.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/healthz")
        first = conn.getresponse()
        first.read()
        sock = conn.sock
        assert first.getheader("Connection") != "close"
        # An error answer to an upload whose body the app never read keeps it usable too.
        conn.request(
            "PUT",
            "/v1/sandboxes/sb-nope/files?path=/workspace/x",
            body=b"x" * 100_000,
            headers={"X-Api-Key": emu.api_key},
        )
        second = conn.getresponse()
        second.read()
        assert second.status == 404
        conn.request("GET", "/healthz")
        third = conn.getresponse()
        third.read()
        assert third.status == 200
        assert conn.sock is sock
    finally:
        conn.close()


def test_non_loopback_host_is_refused() -> None:
    with pytest.raises(ValueError, match="the emulator only listens on loopback addresses"):
        Emulator(host="0.0.0.0")
    with pytest.raises(ValueError, match="the emulator only listens on loopback addresses"):
        Emulator(host="example.com")


def test_start_then_close_without_context_manager() -> None:
    emu = Emulator(rate_limit=None).start()
    try:
        assert requests.get(emu.url + "/healthz", timeout=10).ok
        assert emu.isolation in ("bwrap", "none")
        assert not emu.url.endswith("/v1")
    finally:
        emu.close()
    with pytest.raises(requests.ConnectionError):
        requests.get(emu.url + "/healthz", timeout=10)


def test_emulators_start_side_by_side_in_threads() -> None:
    # Route compilation uses ast, which CPython 3.11 cannot run in threads at once.
    from concurrent.futures import ThreadPoolExecutor

    from createos_sync.emulator import Emulator

    def start_one(_: int) -> str:
        with Emulator(rate_limit=None, isolation="none") as emu:
            return emu.url

    with ThreadPoolExecutor(8) as pool:
        urls = list(pool.map(start_one, range(16)))
    assert len(urls) == 16 and all(url.startswith("http://127.0.0.1:") for url in urls)
