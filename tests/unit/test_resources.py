"""Disks, networks, tokens and the sandbox extras over the wire: retries by method,
secrets never shown, arguments checked before any request."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

import createos_sync as cs
from createos_sync import Client

from .wire import API, SANDBOX, Service, sandbox

SB = f"/sandboxes/{SANDBOX}"
DISK = {"id": "disk_01ABC", "name": "cache", "kind": "s3",
        "config": {"bucket": "b", "endpoint": "https://s3.example.com"}}  # fmt: skip
NET = {"id": "net_1", "name": "mesh", "members": [{"sandbox_id": SANDBOX, "ip": "10.89.1.2"}]}
TOKEN = {"token": "sbt_plaintext-SECRET-1234", "enabled": True, "created_at": "2026-01-01T00Z"}
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHJl user@host"
NEW_DISK = dict(bucket="b", endpoint="https://s3.example.com", access_key="AKIA-ACCESS",
                secret_key="TOP-SECRET-KEY")  # fmt: skip


@pytest.fixture
def box_sandbox() -> dict[str, Any]:
    return sandbox(disk_mib=1024)


@pytest.fixture
def box_options() -> dict[str, Any]:
    return {"ttl": None}


Call = Callable[[Client, cs.Lease], Any]
# (what, method, path, answer, call, repeated after a 502 or a lost answer)
OPERATIONS: list[tuple[str, str, str, Any, Call, bool]] = [
    ("disks", "GET", "/disks", {"data": [DISK]}, lambda c, b: c.disks(), True),
    ("create_disk", "POST", "/disks", DISK, lambda c, b: c.create_disk("cache", **NEW_DISK),
     False),
    ("disk", "GET", "/disks/cache", DISK, lambda c, b: c.disk("cache"), True),
    ("delete_disk", "DELETE", "/disks/cache", {"deleted": True},
     lambda c, b: c.delete_disk("cache"), True),
    ("rotate", "PATCH", "/disks/disk_01ABC", DISK,
     lambda c, b: c.rotate_disk_credentials("disk_01ABC", access_key="a", secret_key="s"), True),
    ("attach_disk", "POST", f"{SB}/disks", {"id": SANDBOX},
     lambda c, b: b.attach_disk("disk_01ABC", "/mnt/d"), False),
    ("detach_disk", "DELETE", f"{SB}/disks/disk_01ABC", {"detached": True},
     lambda c, b: b.detach_disk("disk_01ABC", "/mnt/d"), True),
    ("box.disks", "GET", f"{SB}/disks", {"data": []}, lambda c, b: b.disks(), True),
    ("networks", "GET", "/networks", {"data": [NET]}, lambda c, b: c.networks(), True),
    ("create_network", "POST", "/networks", NET, lambda c, b: c.create_network("mesh"), False),
    ("network", "GET", "/networks/net_1", NET, lambda c, b: c.network("net_1"), True),
    ("delete_network", "DELETE", "/networks/net_1", {}, lambda c, b: c.delete_network("net_1"),
     True),
    ("attach_network", "POST", f"{SB}/networks", {}, lambda c, b: b.attach_network("net_1"),
     False),
    ("detach_network", "DELETE", f"{SB}/networks/net_1", {},
     lambda c, b: b.detach_network("net_1"), True),
    ("network_ip", "GET", "/networks/net_1", NET, lambda c, b: b.network_ip("net_1"), True),
    ("create_token", "POST", f"{SB}/access-token", TOKEN, lambda c, b: b.create_access_token(),
     False),
    ("rotate_token", "POST", f"{SB}/access-token/rotate", TOKEN,
     lambda c, b: b.rotate_access_token(), False),
    ("token_info", "GET", f"{SB}/access-token", {"enabled": False},
     lambda c, b: b.access_token_info(), True),
    ("disable_token", "DELETE", f"{SB}/access-token", {"enabled": False},
     lambda c, b: b.disable_access_token(), True),
    ("grow_disk", "POST", f"{SB}/resize", {"disk_mib": 2048}, lambda c, b: b.grow_disk(2048),
     True),
    ("ssh_keys", "POST", f"{SB}/ssh-pubkeys", {"count": 1}, lambda c, b: b.add_ssh_keys([KEY]),
     False),
    ("bandwidth", "GET", f"{SB}/bandwidth", {"quota_bytes": 5}, lambda c, b: b.bandwidth(), True),
    ("recharge", "POST", f"{SB}/bandwidth/recharge", {"quota_bytes": 9},
     lambda c, b: b.recharge_bandwidth(4), False),
    ("by_ip", "GET", "/sandboxes/by-ip/10.0.0.2", sandbox(),
     lambda c, b: c.sandbox_by_ip("10.0.0.2"), True),
]  # fmt: skip
IDS = [o[0] for o in OPERATIONS]


@pytest.mark.parametrize(("what", "method", "path", "answer", "call", "safe"), OPERATIONS, ids=IDS)
def test_one_request_each_and_retries_by_method(
    client: Client, box: cs.Lease, service: Service,
    what: str, method: str, path: str, answer: Any, call: Call, safe: bool,
) -> None:  # fmt: skip
    before = len(service.calls())
    service.add(method, path, 503)  # refused: repeated whatever the method
    service.add(method, path, 502)
    if safe:
        service.add(method, path, 200, answer)
        call(client, box)
        assert len(service.calls()) - before == 3
    else:
        with pytest.raises(cs.CreateosApiError, match="HTTP 502 during ") as caught:
            call(client, box)
        assert caught.value.status == 502 and caught.value.outcome_unknown
        assert len(service.calls()) - before == 2  # a creation is never repeated blind


def test_disk_keys_are_never_shown(client: Client, service: Service) -> None:
    echo = {"status": "fail", "message": "bad TOP-SECRET-KEY for AKIA-ACCESS", "code": 400}
    service.mock.add("POST", API + "/disks", status=400, json=echo)  # echoes what it was sent
    with pytest.raises(cs.CreateosApiError) as caught:
        client.create_disk("cache", **NEW_DISK)
    assert "TOP-SECRET" not in str(caught.value) and "AKIA-ACCESS" not in str(caught.value)
    sent = json.loads(service.calls("POST")[0].request.body)
    assert sent["credentials"] == {"access_key": "AKIA-ACCESS", "secret_key": "TOP-SECRET-KEY"}
    with pytest.raises(ValueError, match="secret_key must be") as bad:
        client.create_disk("cache", **{**NEW_DISK, "secret_key": "TOP SECRET"})
    assert "TOP" not in str(bad.value)


def test_a_token_is_masked_and_a_malformed_one_never_shown(box: cs.Lease, service: Service) -> None:
    service.add("POST", f"{SB}/access-token", 201, TOKEN)
    token = box.create_access_token()
    assert token == TOKEN["token"] and "SECRET" not in repr(token)
    service.add("POST", f"{SB}/access-token/rotate", 200, {**TOKEN, "token": "sbt_x\nSECRET"})
    with pytest.raises(cs.ProtocolError, match="the answer holds no usable access token") as caught:
        box.rotate_access_token()
    assert "SECRET" not in str(caught.value)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda c: c.create_disk("UPPER", **NEW_DISK),
            ValueError,
            "a disk name is 1..63 lowercase letters",
        ),
        (
            lambda c: c.create_disk("ok", **{**NEW_DISK, "endpoint": "ftp://x"}),
            ValueError,
            r"endpoint must be an http\(s\) URL with a host",
        ),
        (
            lambda c: c.create_disk("ok", **{**NEW_DISK, "endpoint": "https://u:p@x"}),
            ValueError,
            "endpoint must not hold user information",
        ),
        (lambda c: c.disk(3), TypeError, "disk must be a Disk, a disk id or a disk name"),
        (lambda c: c.create_network(""), ValueError, "a network name is 1..63 letters"),
        (lambda c: c.network(None), TypeError, "network must be a Network or a network id"),
        (lambda c: c.sandbox_by_ip("10.0.0"), ValueError, "'10.0.0' is not an IP address"),
        (
            lambda c: c.lease(disks={"/": "cache"}),
            ValueError,
            "mount_path cannot be '/', nor under /proc",
        ),
        (
            lambda c: c.lease(disks={"/mnt/a/../b": "cache"}),
            ValueError,
            "mount_path must be normalised",
        ),
        (lambda c: c.lease(disks=["cache"]), ValueError, "disks must map mount paths to disks"),
        (
            lambda c: c.lease(sandbox_id="sb-1", networks=["net_1"]),
            ValueError,
            "disks and networks are attached to a new sandbox",
        ),
        (
            lambda c: c.lease(ssh_keys="ssh-ed25519 AAAA"),
            ValueError,
            "ssh keys must be a non-empty sequence",
        ),
    ],
)
def test_bad_arguments_fail_before_any_request(
    client: Client,
    service: Service,
    call: Callable[[Client], Any],
    error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error, match=message):
        call(client)
    assert service.calls() == []


def test_box_arguments_fail_before_any_request(box: cs.Lease, service: Service) -> None:
    before = len(service.calls())
    for bad, error, message in (
        (lambda: box.attach_disk("cache", "mnt"), ValueError, "mount_path must be an absolute"),
        (
            lambda: box.attach_disk("cache", "/mnt", sub_path="/abs"),
            ValueError,
            "sub_path must be a relative, normalised path",
        ),
        (
            lambda: box.attach_disk("cache", "/mnt", sub_path="../up"),
            ValueError,
            "sub_path must be a relative, normalised path",
        ),
        (
            lambda: box.detach_disk(object(), "/mnt"),  # type: ignore[arg-type]
            TypeError,
            "disk must be a Disk, a disk id or a disk name",
        ),
        (  # smaller than the 1024 MiB it has
            lambda: box.grow_disk(512),
            ValueError,
            "disks only grow: disk_mib must be at least 1024",
        ),
        (lambda: box.grow_disk(True), TypeError, "disk_mib must be an int"),  # type: ignore[arg-type]
        (lambda: box.recharge_bandwidth(0), ValueError, r"add_bytes must be in 1\.\."),
        (lambda: box.add_ssh_keys([]), ValueError, "ssh keys must be a non-empty sequence"),
        (
            lambda: box.attach_network(7),  # type: ignore[arg-type]
            TypeError,
            "network must be a Network or a network id",
        ),
    ):
        with pytest.raises(error, match=message):
            bad()
    assert len(service.calls()) == before


def test_delete_network_asks_again_while_it_is_in_use(
    client: Client, service: Service, sleeps: list[float]
) -> None:
    service.add("DELETE", "/networks/net_1", 409)
    service.add("DELETE", "/networks/net_1", 409)
    service.add("DELETE", "/networks/net_1", 200, {})
    assert client.delete_network("net_1") is True
    assert len(service.calls("DELETE")) == 3 and len(sleeps) == 2


def test_models_show_no_server_text_unchecked() -> None:
    disk = cs.Disk.from_api({**DISK, "name": "x\x1b[31m", "config": {"bucket": "a b"}})
    assert disk.name == "(unrecognised)" and disk.bucket == "(unrecognised)"
    network = cs.Network.from_api({"id": "n", "members": [{"sandbox_id": "sb", "ip": "evil"}]})
    assert network.members == {"sb": "(unrecognised)"}
    mount = cs.DiskMount.from_api({"disk_id": "d", "mount_error": "boom\x1b[2J" + "x" * 500})
    assert mount.error is not None and "\x1b" not in mount.error and len(mount.error) <= 200
