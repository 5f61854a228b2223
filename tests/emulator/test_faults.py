"""Scripted faults, each observed from the client side."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest
import requests

from createos_sync.emulator import OPERATIONS, Fault

from ..waiting import wait_until
from .helpers import Api, output


def test_operation_names_are_the_published_ones() -> None:
    assert sorted(OPERATIONS) == sorted(
        [
            "healthz",
            "readyz",
            "hosts",
            "shapes",
            "rootfs",
            "whoami",
            "sandbox.create",
            "sandbox.list",
            "sandbox.get",
            "sandbox.delete",
            "sandbox.patch",
            "sandbox.pause",
            "sandbox.resume",
            "sandbox.fork",
            "sandbox.egress",
            "file.write",
            "file.read",
            "exec",
            "process.create",
            "process.list",
            "process.get",
            "process.connect",
            "process.input",
            "process.stdin_close",
            "process.signal",
            "process.resize",
            "process.wait",
            "process.delete",
            "template.create",
            "template.list",
            "template.get",
            "template.delete",
            "template.logs",
            "disk.create",
            "disk.list",
            "disk.get",
            "disk.delete",
            "disk.rotate",
            "disk.attach",
            "disk.mounts",
            "disk.detach",
            "network.create",
            "network.list",
            "network.get",
            "network.delete",
            "network.attach",
            "network.detach",
            "token.create",
            "token.get",
            "token.delete",
            "token.rotate",
            "sandbox.ssh_keys",
            "sandbox.resize",
            "sandbox.bandwidth",
            "sandbox.recharge",
            "sandbox.by_ip",
        ]
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"operation": "sandbox.explode", "status": 500}, "unknown operation"),
        ({"operation": "healthz"}, "the fault does nothing"),
        (
            {"operation": "healthz", "status": 503, "drop": True},
            "status, drop and body exclude each other",
        ),
        (
            {"operation": "healthz", "status": 200},
            r"status must be an HTTP error status \(400\.\.599\)",
        ),
        ({"operation": "healthz", "perform": True}, "perform needs status or drop"),
        ({"operation": "healthz", "status": 503, "retry_after": 3}, "retry_after needs status 429"),
        (
            {"operation": "healthz", "drop_after_frames": 1},
            "drop_after_frames applies to process.connect and template.logs",
        ),
        (
            {"operation": "process.connect", "drop_after_frames": 1, "status": 503},
            "trickle exclude status, drop and body",
        ),
        (
            {"operation": "healthz", "tree_exited_false": True},
            "tree_exited_false applies to process.delete only",
        ),
        ({"operation": "process.delete", "kill": False}, "kill=False needs tree_exited_false"),
        ({"operation": "healthz", "status": 503, "times": 0}, "times must be a positive integer"),
        ({"operation": "healthz", "delay": -1}, "delay must be a finite number >= 0"),
        (  # 503: not processed
            {"operation": "sandbox.create", "status": 503, "perform": True},
            "429 and 503 mean the request was not processed",
        ),
        (
            {"operation": "sandbox.create", "status": 429, "perform": True},
            "429 and 503 mean the request was not processed",
        ),
        ({"operation": "healthz", "envelope": "error"}, "envelope needs status"),
        (
            {"operation": "healthz", "status": 400, "envelope": "jsend"},
            "message must be a str and envelope 'fail' or 'error'",
        ),
        (
            {"operation": "healthz", "trickle": -1},
            "trickle must be a finite number of seconds >= 0",
        ),
        (
            {"operation": "process.connect", "trickle": 0.1, "status": 500},
            "trickle exclude status, drop and body",
        ),
    ],
)
def test_incoherent_faults_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Fault(**kwargs)


def test_status_fault_applies_times_then_is_used_up(api: Api) -> None:
    api.emu.faults.add(Fault("shapes", status=503, times=2))
    assert [api.call("GET", "/v1/shapes").status_code for _ in range(3)] == [503, 503, 200]
    assert [r.status for r in api.emu.request_log] == [503, 503, 200]


def test_faults_are_consumed_in_order(api: Api) -> None:
    api.emu.faults.add(Fault("shapes", status=502))
    api.emu.faults.add(Fault("shapes", status=429, retry_after=7))
    assert api.call("GET", "/v1/shapes").status_code == 502
    limited = api.call("GET", "/v1/shapes")
    assert limited.status_code == 429
    assert limited.headers["Retry-After"] == "7"
    api.emu.faults.add(Fault("shapes", status=500))
    api.emu.faults.clear()
    assert api.call("GET", "/v1/shapes").status_code == 200


def test_drop_closes_the_connection_without_an_answer(api: Api) -> None:
    api.emu.faults.add(Fault("sandbox.list", drop=True))
    with pytest.raises(requests.ConnectionError):
        api.call("GET", "/v1/sandboxes")
    assert api.emu.request_log[-1].status is None
    assert api.call("GET", "/v1/sandboxes").status_code == 200


def test_performed_creation_with_a_lost_reply_is_ambiguous(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    any_api.emu.faults.add(Fault("process.create", drop=True, perform=True))
    with pytest.raises(requests.ConnectionError):
        any_api.call(
            "POST", f"/v1/sandboxes/{sandbox_id}/processes", json={"cmd": "sleep", "args": ["1000"]}
        )
    [created] = any_api.data("GET", f"/v1/sandboxes/{sandbox_id}/processes")["processes"]
    assert created["state"] == "running"
    any_api.emu.faults.add(Fault("sandbox.create", status=502, perform=True))
    assert any_api.call("POST", "/v1/sandboxes", json={"shape": "s-1vcpu-1gb"}).status_code == 502
    assert len(any_api.emu.live_sandboxes()) == 2


def test_delay_slows_the_answer(api: Api) -> None:
    api.emu.faults.add(Fault("healthz", delay=0.3))
    started = time.monotonic()
    assert api.call("GET", "/healthz").status_code == 200
    assert time.monotonic() - started >= 0.3


def test_body_fault_answers_exactly_those_bytes(api: Api) -> None:
    api.emu.faults.add(Fault("sandbox.list", body=b'{"status": "succ'))
    response = api.call("GET", "/v1/sandboxes")
    assert response.status_code == 200
    assert response.content == b'{"status": "succ'


def test_drop_after_frames_cuts_the_stream_and_replay_recovers(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    script = "cat >/dev/null; for i in 1 2 3 4 5; do echo line$i; sleep 0.05; done"
    process_id = any_api.process(sandbox_id, "bash", "-c", script)
    any_api.emu.faults.add(Fault("process.connect", drop_after_frames=2))
    seen: list[dict[str, Any]] = []
    with any_api.connect(sandbox_id, process_id) as response:
        assert response.status_code == 200
        any_api.call("POST", any_api.proc_path(sandbox_id, process_id, "/stdin/close"))
        with pytest.raises(requests.RequestException):
            for line in response.iter_lines():
                seen.append(json.loads(line))
    data = [f for f in seen if f["type"] == "data"]
    assert [f["seq"] for f in data] == [1, 2]
    rest = any_api.frames(sandbox_id, process_id, after=2)
    assert output(data + rest) == b"".join(b"line%d\n" % i for i in range(1, 6))
    assert rest[-1] == {"type": "exit", "exit_code": 0}


def test_tree_exited_false_with_and_without_kill(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    spared = any_api.process(sandbox_id, "sleep", "1000")
    any_api.emu.faults.add(Fault("process.delete", tree_exited_false=True, kill=False))
    reply = any_api.data("DELETE", any_api.proc_path(sandbox_id, spared))
    assert reply["tree_exited"] is False
    assert [p.process_id for p in any_api.emu.live_processes()] == [spared]
    any_api.emu.faults.add(Fault("process.delete", tree_exited_false=True))
    reply = any_api.data("DELETE", any_api.proc_path(sandbox_id, spared))
    assert reply["tree_exited"] is False
    assert any_api.emu.live_processes() == []
    confirmed = any_api.data("GET", any_api.proc_path(sandbox_id, spared))
    assert confirmed["tree_exited"] is True


def test_admin_endpoint_adds_and_clears_faults(api: Api) -> None:
    body = base64.b64encode(b"not json").decode()
    added = api.call("POST", "/_emulator/faults", json={"operation": "rootfs", "body_base64": body})
    assert added.status_code == 201
    assert requests.get(api.emu.url + "/v1/rootfs", timeout=10).content == b"not json"
    api.data("POST", "/_emulator/faults", json={"operation": "rootfs", "status": 500, "times": 5})
    api.data("DELETE", "/_emulator/faults")
    assert requests.get(api.emu.url + "/v1/rootfs", timeout=10).status_code == 200
    bad = api.call(
        "POST", "/_emulator/faults", json={"operation": "rootfs", "drop": True, "status": 500}
    )
    assert bad.status_code == 400
    unknown = api.call("POST", "/_emulator/faults", json={"operation": "x", "status": 500})
    assert unknown.status_code == 400


def test_admin_state_lists_live_sandboxes_and_processes(api: Api) -> None:
    sandbox_id = api.sandbox()
    process_id = api.process(sandbox_id, "sleep", "1000")
    state = wait_until(lambda: (s := api.data("GET", "/_emulator/state"))["processes"] and s)
    assert state["sandboxes"] == [sandbox_id]
    [live] = state["processes"]
    assert (live["sandbox_id"], live["process_id"]) == (sandbox_id, process_id)
    assert live["pids"]


def test_status_faults_carry_their_message_in_either_envelope(api: Api) -> None:
    api.emu.faults.add(
        Fault("sandbox.create", status=400, message="unknown shape", envelope="error")
    )
    api.emu.faults.add(Fault("sandbox.create", status=402, message="payment required"))
    api.emu.faults.add(Fault("sandbox.create", status=503, message="no capacity"))
    answers = [api.call("POST", "/v1/sandboxes", json={"shape": "s-1vcpu-1gb"}) for _ in range(3)]
    assert [a.status_code for a in answers] == [400, 402, 503]
    assert answers[0].json() == {"status": "error", "message": "unknown shape", "code": 400}
    assert answers[1].json() == {
        "status": "fail",
        "data": "payment required",
        "message": "payment required",
        "code": 402,
    }
    assert answers[2].json() == {"status": "error", "message": "no capacity", "code": 503}
    assert api.emu.live_sandboxes() == []  # 503 means not processed: nothing was created


def test_trickle_sends_the_real_answer_a_byte_at_a_time(api: Api) -> None:
    api.emu.faults.add(Fault("healthz", trickle=0.01))
    started = time.monotonic()
    body = api.call("GET", "/healthz").content
    assert json.loads(body) == {"status": "success", "data": {"up": True}}
    assert time.monotonic() - started >= 0.01 * len(body)
