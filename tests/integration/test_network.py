"""The network surface end to end: the SDK, the emulator, real servers in real sandboxes."""

from __future__ import annotations

import re
import time

import pytest
import requests

import createos_sync as cs
from createos_sync import Client
from createos_sync.emulator import Emulator

from ..ports import free_port
from .helpers import operations

SERVER = ["python3", "-u", "-m", "http.server", "0", "--bind", "127.0.0.1"]


def start_server(box: cs.Lease) -> int:
    """``python3 -m http.server`` on a free port in /workspace; its port, from its output."""
    server = box.start(SERVER, cwd="/workspace")
    for stream, text in server.output():
        found = re.search(r"port (\d+)", text)
        if stream == "stdout" and found:
            return int(found.group(1))
    raise AssertionError(f"the server ended early: {server.wait()!r}")


def test_a_server_in_the_sandbox_is_fetched_through_its_preview_url(
    client: Client, emulator: Emulator
) -> None:
    with client.lease(ingress=True) as box:
        box.write_file("/workspace/index.html", "<h1>hello from the sandbox</h1>\n")
        box.write_file("/workspace/data/numbers.txt", "1 2 3\n")
        port = start_server(box)
        emulator.clear_request_log()
        box.wait_for_port(port, timeout=10)
        url = box.preview_url(port)
        assert operations(emulator) == [("exec", 200)]  # 1 request, then none for the URL
        page = requests.get(url, timeout=10)
        assert page.status_code == 200 and page.text == "<h1>hello from the sandbox</h1>\n"
        listing = requests.get(url + "data", timeout=10)  # redirected to data/, under the prefix
        assert listing.status_code == 200 and listing.url == url + "data/"
        assert 'href="numbers.txt"' in listing.text
        assert requests.get(url + "data/numbers.txt", timeout=10).text == "1 2 3\n"


def test_ingress_switched_on_and_off(client: Client, emulator: Emulator) -> None:
    with client.lease() as box:
        port = start_server(box)
        with pytest.raises(ValueError, match="ingress is off"):
            box.preview_url(port)
        emulator.clear_request_log()
        assert box.set_ingress(True).ingress_enabled is True
        url = box.preview_url(port)
        box.wait_for_port(port)
        assert requests.get(url, timeout=10).status_code == 200
        assert box.set_ingress(False).ingress_enabled is False
        with pytest.raises(ValueError, match="ingress is off"):
            box.preview_url(port)
        assert requests.get(url, timeout=10).status_code == 403  # the proxy refuses too
        assert box.info().ingress_enabled is False
        assert operations(emulator, box.id) == [
            ("sandbox.patch", 200), ("exec", 200), ("sandbox.patch", 200), ("sandbox.get", 200),
        ]  # fmt: skip


def test_wait_for_port_waits_for_a_late_server(client: Client, emulator: Emulator) -> None:
    port = free_port()
    with client.lease() as box:
        box.start(f"sleep 1 && exec python3 -m http.server {port} --bind 127.0.0.1")
        emulator.clear_request_log()
        started = time.monotonic()
        box.wait_for_port(port, timeout=20)
        assert time.monotonic() - started >= 0.9
        assert operations(emulator) == [("exec", 200)]
        probe = f"exec 3<>/dev/tcp/127.0.0.1/{port}"
        assert box.run(probe).ok  # it really listens


def test_wait_for_port_times_out_with_one_request(client: Client, emulator: Emulator) -> None:
    port = free_port()
    with client.lease() as box:
        emulator.clear_request_log()
        started = time.monotonic()
        with pytest.raises(cs.OperationTimeout, match=f"port {port}"):
            box.wait_for_port(port, timeout=1)
        assert 0.9 <= time.monotonic() - started < 10
        assert operations(emulator) == [("exec", 200)]


def test_egress_rules_round_trip(client: Client, emulator: Emulator) -> None:
    with client.lease(egress=["pypi.org", "*.github.com"]) as box:
        emulator.clear_request_log()
        assert box.egress() == ["pypi.org", "*.github.com"]
        assert box.set_egress(["10.0.0.0/8"]) == ["10.0.0.0/8"]
        assert box.egress() == ["10.0.0.0/8"]
        assert box.info().egress == ("10.0.0.0/8",)
        assert box.set_egress(None) == []
        assert operations(emulator, box.id) == [
            ("sandbox.egress", 200), ("sandbox.egress", 200), ("sandbox.egress", 200),
            ("sandbox.get", 200), ("sandbox.egress", 200),
        ]  # fmt: skip
        with pytest.raises(ValueError, match="egress must be a sequence of rule strings"):
            box.set_egress("pypi.org")
        assert len(operations(emulator, box.id)) == 5


def test_auto_pause_is_set_and_turned_off(client: Client, emulator: Emulator) -> None:
    with client.lease(auto_pause_after=3600) as box:
        assert box.info().auto_pause_after == 3600
        emulator.clear_request_log()
        assert box.set_auto_pause(120).auto_pause_after == 120
        assert box.info().auto_pause_after == 120
        assert box.set_auto_pause(None).auto_pause_after is None
        assert box.info().auto_pause_after is None
        with pytest.raises(ValueError, match=r"auto-pause must be whole seconds in 60\.\.86400"):
            box.set_auto_pause(30)
        assert [op for op, _ in operations(emulator, box.id)] == [
            "sandbox.patch", "sandbox.get", "sandbox.patch", "sandbox.get",
        ]  # fmt: skip
