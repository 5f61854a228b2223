"""The emulator's disks, networks and tokens in each isolation and network mode."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from createos_sync.emulator import Emulator

from ..waiting import wait_until
from .helpers import Api

SERVER = (
    "import socket\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('0.0.0.0', 0)); s.listen(); print(s.getsockname()[1], flush=True)\n"
    "while True:\n"
    "    c, _ = s.accept(); c.sendall(b'over the network'); c.close()\n"
)


def shell(api: Api, sandbox_id: str, script: str) -> str:
    reply = api.data("POST", f"/v1/sandboxes/{sandbox_id}/exec",
                     json={"cmd": "bash", "args": ["-c", script]})  # fmt: skip
    assert reply["result"]["exit_code"] == 0, reply
    return str(reply["result"]["stdout"])


def first_line(api: Api, sandbox_id: str, process_id: str) -> int:
    with api.connect(sandbox_id, process_id) as stream:
        for line in stream.iter_lines():
            frame = json.loads(line) if line else {}
            if frame.get("type") == "data":
                return int(base64.b64decode(frame["data_base64"]))
    raise AssertionError("the server printed nothing")


def register(api: Api) -> str:
    disk = api.data("POST", "/v1/disks", json={
        "name": "cache", "kind": "s3", "config": {"bucket": "b", "endpoint": "https://s3.x"},
        "credentials": {"access_key": "AK", "secret_key": "SECRET-KEY"},
    })  # fmt: skip
    assert "SECRET" not in str(disk) and "credentials" not in disk
    return str(disk["id"])


@pytest.fixture(params=["none", "bwrap"])
def mode_api(request: pytest.FixtureRequest, make_emu: Callable[..., Emulator]) -> Api:
    emu = make_emu(isolation=request.param)
    if emu.isolation != request.param:
        pytest.skip("bubblewrap does not work here")
    return Api(emu)


def test_a_disk_keeps_its_files_across_sandboxes(mode_api: Api) -> None:
    disk_id = register(mode_api)
    mount = [{"disk_id": disk_id, "mount_path": "/mnt/cache", "sub_path": "ci"}]
    first = mode_api.sandbox(disks=mount)
    shell(mode_api, first, "echo persisted > /mnt/cache/file")
    mode_api.data("DELETE", f"/v1/sandboxes/{first}")
    second = mode_api.sandbox()
    mode_api.data("POST", f"/v1/sandboxes/{second}/disks",
                  json={"disk_id": disk_id, "mount_path": "/data"})  # fmt: skip
    assert shell(mode_api, second, "cat /data/ci/file") == "persisted\n"
    read = mode_api.call("GET", f"/v1/sandboxes/{second}/files", params={"path": "/data/ci/file"})
    assert read.content == b"persisted\n"
    assert mode_api.call("DELETE", f"/v1/disks/{disk_id}").status_code == 409  # mounted
    detach = f"/v1/sandboxes/{second}/disks/{disk_id}"
    assert mode_api.data("DELETE", detach, params={"mount_path": "/data"})["detached"] is True
    assert mode_api.call("DELETE", detach, params={"mount_path": "/data"}).status_code == 404
    assert mode_api.call("DELETE", f"/v1/sandboxes/{second}/disks/cache").status_code == 404


@pytest.mark.parametrize("network", ["shared", "private"])
def test_members_reach_each_other_at_their_ips(
    make_emu: Callable[..., Emulator], network: str
) -> None:
    emu = make_emu(network="auto" if network == "private" else "shared")
    if emu.network != network:
        pytest.skip("private network namespaces do not work here")
    api = Api(emu)
    net = api.data("POST", "/v1/networks", json={"name": "mesh"})["id"]
    server, client = api.sandbox(networks=[{"id": net}]), api.sandbox()
    api.data("POST", f"/v1/sandboxes/{client}/networks", json={"id": net})
    members = {m["sandbox_id"]: m["ip"] for m in api.data("GET", f"/v1/networks/{net}")["members"]}
    prefix = "10.89." if network == "private" else "127.89."
    assert set(members) == {server, client}
    assert all(ip.startswith(prefix) for ip in members.values())
    started = api.process(server, "python3", "-c", SERVER)
    port = first_line(api, server, started)  # printed once it listens
    address = (members[server], port)
    probe = f"import socket; print(socket.create_connection({address!r}).recv(99))"
    assert shell(api, client, f'python3 -c "{probe}"') == "b'over the network'\n"
    assert api.call("DELETE", f"/v1/networks/{net}").status_code == 409  # members
    for sandbox_id in (server, client):
        api.data("DELETE", f"/v1/sandboxes/{sandbox_id}")
    assert api.call("DELETE", f"/v1/networks/{net}").status_code == 409  # a moment after


def test_a_token_acts_on_its_own_sandbox_only(api: Api) -> None:
    mine, other = api.sandbox(), api.sandbox()
    token = api.data("POST", f"/v1/sandboxes/{mine}/access-token")["token"]
    assert api.call("POST", f"/v1/sandboxes/{mine}/access-token").status_code == 409
    as_token = {"X-Api-Key": token}
    assert api.call("GET", f"/v1/sandboxes/{mine}", headers=as_token).status_code == 200
    assert api.call("GET", f"/v1/sandboxes/{other}", headers=as_token).status_code == 404
    assert api.call("GET", "/v1/sandboxes", headers=as_token).status_code == 403
    assert api.call("GET", "/_emulator/state", headers=as_token).status_code == 401
    rotate = f"/v1/sandboxes/{mine}/access-token/rotate"
    assert api.call("POST", rotate, headers=as_token).status_code == 403  # no minting
    new = api.data("POST", rotate)["token"]
    assert api.call("GET", f"/v1/sandboxes/{mine}", headers=as_token).status_code == 401
    api.data("DELETE", f"/v1/sandboxes/{mine}")
    assert api.call("GET", f"/v1/sandboxes/{mine}", headers={"X-Api-Key": new}).status_code == 401


def test_a_symlink_in_a_disk_never_mounts_the_host(mode_api: Api) -> None:
    disk_id = register(mode_api)
    first = mode_api.sandbox(disks=[{"disk_id": disk_id, "mount_path": "/mnt/d"}])
    shell(mode_api, first, "ln -s /etc /mnt/d/escape")
    second = mode_api.sandbox()
    attach = mode_api.call(
        "POST",
        f"/v1/sandboxes/{second}/disks",
        json={"disk_id": disk_id, "mount_path": "/x", "sub_path": "escape"},
    )
    assert attach.status_code == 400 and "symlink" in attach.text


def test_ips_and_networks_are_reused_once_free(api: Api) -> None:
    first = api.data("POST", "/v1/networks", json={"name": "one"})["id"]
    a, b = api.sandbox(networks=[{"id": first}]), api.sandbox()
    api.data("POST", f"/v1/sandboxes/{b}/networks", json={"id": first})

    def ips(net: str) -> dict[str, str]:
        return {m["sandbox_id"]: m["ip"] for m in api.data("GET", f"/v1/networks/{net}")["members"]}

    ip_b = ips(first)[b]
    api.data("DELETE", f"/v1/sandboxes/{b}/networks/{first}")
    api.data("POST", f"/v1/sandboxes/{b}/networks", json={"id": first})  # rejoins: a new link
    assert ips(first)[b] == ip_b  # the lowest free number again
    second = api.data("POST", "/v1/networks", json={"name": "two"})["id"]
    prefix = ips(first)[a].rsplit(".", 1)[0]
    api.data("DELETE", f"/v1/sandboxes/{a}")
    api.data("DELETE", f"/v1/sandboxes/{b}")
    api.data("DELETE", f"/v1/networks/{second}")
    wait_until(lambda: api.call("DELETE", f"/v1/networks/{first}").status_code == 200,
               what="the network deleted once no longer in use")  # fmt: skip
    third = api.data("POST", "/v1/networks", json={"name": "three"})["id"]
    c = api.sandbox(networks=[{"id": third}])
    assert ips(third)[c].rsplit(".", 1)[0] == prefix  # the freed network's addresses


def test_no_disk_under_a_read_only_system_directory(tmp_path: Path) -> None:
    from createos_sync.emulator._machine.isolation import Bubblewrap
    from createos_sync.emulator._state.disks import DiskStore
    from createos_sync.emulator._wire import ApiError

    store = DiskStore(tmp_path, Bubblewrap("bwrap", None))  # probed without overlays
    disk = store.register({"name": "d", "config": {"bucket": "b", "endpoint": "https://s3.x"},
                           "credentials": {"access_key": "a", "secret_key": "s"}})  # fmt: skip
    with pytest.raises(ApiError) as refused:
        store.check_mount({"disk_id": disk.id, "mount_path": "/opt/data"})
    assert refused.value.status == 400 and "/mnt" in refused.value.message
    assert store.check_mount({"disk_id": disk.id, "mount_path": "/mnt/data"})[1] == "/mnt/data"
