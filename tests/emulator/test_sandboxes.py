"""Sandbox lifecycle: validation, asynchronous transitions, pause, fork, destroy."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from createos_sync.emulator import Emulator
from createos_sync.emulator._machine.isolation import NoIsolation
from createos_sync.emulator._state.catalog import SHAPES
from createos_sync.emulator._state.sandbox import SandboxSpec
from createos_sync.emulator._state.sandboxes import SandboxStore

from ..waiting import wait_until
from .helpers import Api

SANDBOX_FIELDS = {
    "id",
    "name",
    "status",
    "ip",
    "shape",
    "rootfs",
    "vcpu",
    "mem_mib",
    "disk_mib",
    "spawn_ms",
    "egress",
    "region",
    "created_at",
    "auto_pause_after_seconds",
    "ingress_enabled",
    "envs",
    "ssh_pubkeys",
}


def test_creation_answers_once_the_sandbox_runs_and_fields_are_complete(api: Api) -> None:
    """As on the service (the official TypeScript SDK trusts the answer: no poll after it)."""
    created = api.data(
        "POST",
        "/v1/sandboxes",
        json={"shape": "s-2vcpu-4gb", "name": "unique-name-1", "auto_pause_after_seconds": 600},
    )
    assert created["status"] == "running"
    assert set(created) >= SANDBOX_FIELDS
    # Omitted, not null, as the service omits them; no preview template without ingress.
    assert None not in created.values()
    assert not {"paused_at", "forked_from", "ingress_url_template"} & set(created)
    assert (created["vcpu"], created["mem_mib"], created["shape"]) == (2, 4096, "s-2vcpu-4gb")
    page = api.data("GET", "/v1/sandboxes")
    assert page["pagination"]["total"] == 1
    [listed] = page["data"]
    assert (listed["id"], listed["name"], listed["status"]) == (
        created["id"],
        "unique-name-1",
        "running",
    )
    assert listed["auto_pause_after_seconds"] == 600


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"shape": "s-64vcpu-1tb"},
        {"shape": "s-1vcpu-1gb", "auto_pause_after_seconds": 59},
        {"shape": "s-1vcpu-1gb", "auto_pause_after_seconds": 86401},
        {"shape": "s-1vcpu-1gb", "envs": {"A": 1}},
        {"shape": "s-1vcpu-1gb", "envs": ["A"]},
        {"shape": "s-1vcpu-1gb", "rootfs": "windows-95"},
        {"shape": "s-1vcpu-1gb", "egress": "everything"},
        {"shape": "s-1vcpu-1gb", "egress": [{"allow": "pypi.org"}]},
        {"shape": "s-1vcpu-1gb", "ingress_enabled": "yes"},
        {"shape": "s-1vcpu-1gb", "name": 3},
    ],
)
def test_bad_creation_requests_are_400(api: Api, body: dict[str, object]) -> None:
    response = api.call("POST", "/v1/sandboxes", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["status"] == "fail"
    assert api.emu.live_sandboxes() == []


def test_list_pages_and_status_filter(api: Api) -> None:
    ids = [api.sandbox(name=f"n{i}") for i in range(3)]
    first = api.data("GET", "/v1/sandboxes", params={"limit": 2, "offset": 0})
    second = api.data("GET", "/v1/sandboxes", params={"limit": 2, "offset": 2})
    assert [s["id"] for s in first["data"] + second["data"]] == ids
    assert first["pagination"] == {"total": 3, "limit": 2, "offset": 0, "count": 2}
    assert second["pagination"]["count"] == 1
    # A limit over 500 is clamped, as the service clamps it (the TS SDK asks for 500).
    clamped = api.data("GET", "/v1/sandboxes", params={"limit": 501})["pagination"]
    assert (clamped["limit"], clamped["count"]) == (500, 3)
    assert api.call("GET", "/v1/sandboxes", params={"limit": 0}).status_code == 400
    api.data("DELETE", f"/v1/sandboxes/{ids[0]}")
    api.wait_status(ids[0], "destroyed")
    remaining = api.data("GET", "/v1/sandboxes")["data"]
    assert [s["id"] for s in remaining] == ids[1:]
    destroyed = api.data("GET", "/v1/sandboxes", params={"status": "destroyed"})["data"]
    assert [s["id"] for s in destroyed] == ids[:1]


def test_delete_is_asynchronous_and_a_second_delete_answers_destroyed(api: Api) -> None:
    sandbox_id = api.sandbox()
    reply = api.data("DELETE", f"/v1/sandboxes/{sandbox_id}")
    assert reply == {"id": sandbox_id, "status": "destroying"}
    assert api.emu.live_sandboxes() == []
    api.wait_status(sandbox_id, "destroyed")
    # As on the service (the official TypeScript SDK's DestroyedResponse): 200, not 404.
    again = api.call("DELETE", f"/v1/sandboxes/{sandbox_id}")
    assert (again.status_code, again.json()["data"]) == (
        200,
        {"id": sandbox_id, "status": "destroyed"},
    )
    assert api.call("DELETE", "/v1/sandboxes/sb-unknown").status_code == 404
    files = api.call("GET", f"/v1/sandboxes/{sandbox_id}/files", params={"path": "/workspace/x"})
    assert files.status_code == 404


def test_destroy_kills_every_process_and_removes_storage(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    workspace = any_api.emu.sandbox_path(sandbox_id, "/workspace")
    for _ in range(2):
        any_api.process(sandbox_id, "bash", "-c", "sleep 1000 & sleep 1000 & wait")
    wait_until(lambda: len(any_api.emu.live_processes()) == 2, what="two live processes")
    any_api.data("DELETE", f"/v1/sandboxes/{sandbox_id}")
    assert any_api.emu.live_processes() == []
    assert not workspace.exists()


def test_pause_freezes_and_resume_continues(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    counter = any_api.emu.sandbox_path(sandbox_id, "/workspace/counter")
    any_api.process(sandbox_id, "bash", "-c", "while true; do echo x >> counter; sleep 0.02; done")
    wait_until(lambda: counter.exists() and counter.stat().st_size > 10, what="counting")
    paused = any_api.call("POST", f"/v1/sandboxes/{sandbox_id}/pause")
    assert paused.status_code == 200  # as on the service: a 202 fails the Langflow backend
    assert paused.json()["data"]["status"] == "pausing"
    any_api.wait_status(sandbox_id, "paused")
    info = any_api.data("GET", f"/v1/sandboxes/{sandbox_id}")
    assert info["paused_at"] is not None
    frozen = counter.stat().st_size
    time.sleep(0.3)
    assert counter.stat().st_size == frozen
    assert any_api.call("POST", f"/v1/sandboxes/{sandbox_id}/pause").status_code == 409
    new = any_api.call("POST", f"/v1/sandboxes/{sandbox_id}/processes", json={"cmd": "true"})
    assert new.status_code == 409
    assert any_api.call("POST", f"/v1/sandboxes/{sandbox_id}/resume").status_code == 200
    any_api.wait_status(sandbox_id, "running")
    wait_until(lambda: counter.stat().st_size > frozen, what="counting again")
    assert any_api.call("POST", f"/v1/sandboxes/{sandbox_id}/resume").status_code == 409


def test_processes_cannot_start_while_forking(make_emu: Callable[..., Emulator]) -> None:
    # (A creation answers once its sandbox runs: a fork is what a client sees starting.)
    api = Api(make_emu(transition_delay=2.0))  # still forking however loaded the machine is
    source = api.data("POST", "/v1/sandboxes", json={"shape": "s-1vcpu-1gb"})["id"]
    sandbox_id = api.data("POST", f"/v1/sandboxes/{source}/fork", json={})["id"]
    response = api.call("POST", f"/v1/sandboxes/{sandbox_id}/processes", json={"cmd": "true"})
    assert response.status_code == 409


def test_fork_copies_files_into_a_new_sandbox(api: Api) -> None:
    source = api.sandbox()
    files = f"/v1/sandboxes/{source}/files"
    assert api.call("PUT", files, params={"path": "/workspace/kept"}, data=b"kept").ok
    fork = api.call("POST", f"/v1/sandboxes/{source}/fork", json={})
    assert fork.status_code == 200
    forked = fork.json()["data"]
    assert forked["id"] != source
    assert (forked["status"], forked["forked_from"]) == ("forking", source)
    assert "name" not in forked  # the service takes no name on a fork, and omits it
    api.wait_status(forked["id"], "running")
    copied = api.call(
        "GET", f"/v1/sandboxes/{forked['id']}/files", params={"path": "/workspace/kept"}
    )
    assert copied.content == b"kept"
    assert api.call("PUT", files, params={"path": "/workspace/kept"}, data=b"changed").ok
    assert api.emu.sandbox_path(forked["id"], "/workspace/kept").read_bytes() == b"kept"


def test_an_answer_has_the_status_its_transition_began_with(
    make_emu: Callable[..., Emulator],
) -> None:
    """Not the status once the request's own work is done (a fork's copy, a destroy's
    removal, a stall): with a transition of 1 ms, that work alone would settle it. A
    creation is the exception: it answers once the sandbox runs."""
    api = Api(make_emu(transition_delay=0.001))
    created = api.data("POST", "/v1/sandboxes", json={"shape": "s-1vcpu-1gb"})
    assert created["status"] == "running"
    source = created["id"]
    forked = api.data("POST", f"/v1/sandboxes/{source}/fork", json={})
    assert forked["status"] == "forking"
    assert api.data("POST", f"/v1/sandboxes/{source}/pause")["status"] == "pausing"
    api.wait_status(source, "paused")
    assert api.data("POST", f"/v1/sandboxes/{source}/resume")["status"] == "resuming"
    api.wait_status(forked["id"], "running")
    for sandbox_id in (source, forked["id"]):
        assert api.data("DELETE", f"/v1/sandboxes/{sandbox_id}")["status"] == "destroying"


def test_egress_rules_are_stored(api: Api) -> None:
    sandbox_id = api.sandbox(egress=["pypi.org", "10.0.0.0/8"])
    path = f"/v1/sandboxes/{sandbox_id}/egress"
    view = {"id": sandbox_id}  # the egress view carries the sandbox's id, as on the service
    assert api.data("GET", path) == {**view, "egress": ["pypi.org", "10.0.0.0/8"]}
    changed = api.data("PUT", path, json={"egress": ["*.github.com"]})
    assert changed == {**view, "egress": ["*.github.com"]}
    assert api.data("GET", f"/v1/sandboxes/{sandbox_id}")["egress"] == ["*.github.com"]
    assert api.data("PUT", path, json={"egress": []}) == {**view, "egress": []}
    assert api.data("GET", path) == {**view, "egress": []}
    for bad in (1, "pypi.org", [{"allow": "pypi.org"}], [""], ["a b"]):
        assert api.call("PUT", path, json={"egress": bad}).status_code == 400
    assert api.data("GET", path) == {**view, "egress": []}


def test_idle_sandbox_is_paused_by_itself(tmp_path: Path) -> None:
    # Through the API the minimum is 60 s; the store itself takes any idle limit.
    store = SandboxStore(
        tmp_path, NoIsolation(), transition_delay=0.0, journal_bytes=4096, frame_bytes=1024
    )
    try:
        spec = SandboxSpec(
            shape=SHAPES["s-1vcpu-1gb"],
            rootfs="ubuntu-24.04",
            region="local",
            name=None,
            disk_mib=1024,
            envs={},
            egress=[],
            auto_pause_after_seconds=0,
            ingress_enabled=False,
        )
        sandbox = store.create(spec)
        wait_until(lambda: sandbox.settle() == "paused", what="auto-pause")
    finally:
        store.close()


def test_a_failed_sandbox_ends_its_streams_without_an_exit_and_refuses_work(api: Api) -> None:
    sandbox_id = api.sandbox()
    process_id = api.process(sandbox_id, "sleep", "1000")
    with api.connect(sandbox_id, process_id) as response:
        api.emu.fail_sandbox(sandbox_id)
        frames = [json.loads(line) for line in response.iter_lines() if line]
    assert [f["type"] for f in frames if f["type"] != "heartbeat"] == []  # no exit frame
    assert api.status(sandbox_id) == "failed"
    assert api.emu.live_processes() == []
    assert api.frames(sandbox_id, process_id) == []  # a reconnection ends at once, too
    created = api.call("POST", f"/v1/sandboxes/{sandbox_id}/processes", json={"cmd": "true"})
    assert created.status_code == 409
    api.data("DELETE", f"/v1/sandboxes/{sandbox_id}")
    with pytest.raises(ValueError, match="status must be 'failed' or 'error'"):
        api.emu.fail_sandbox(sandbox_id, "paused")
