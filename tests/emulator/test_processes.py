"""Managed processes: lifecycle, stdin, signals, waits, tree termination, exec."""

from __future__ import annotations

import base64
import json
import os
import secrets
import time
from pathlib import Path

import pytest

from createos_sync.emulator._machine.isolation import Launch, NoIsolation
from createos_sync.emulator._machine.journal import End
from createos_sync.emulator._machine.processes import Command, ManagedProcess
from createos_sync.emulator._machine.proctree import read_stat as proc_stat
from createos_sync.emulator._machine.storage import Storage

from ..waiting import wait_until
from .helpers import Api, output


def test_process_json_and_exit_code(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    reply = any_api.data(
        "POST",
        f"/v1/sandboxes/{sandbox_id}/processes",
        json={"cmd": "bash", "args": ["-c", "exit 7"]},
    )
    assert reply["state"] in ("starting", "running", "exited")
    assert reply["pid"] > 0
    info = any_api.wait_exit(sandbox_id, reply["process_id"])
    assert {k: info[k] for k in ("kind", "state", "leader_exited", "exit_code", "signal")} == {
        "kind": "process",
        "state": "exited",
        "leader_exited": True,
        "exit_code": 7,
        "signal": None,
    }
    assert info["cmd"] == "bash"
    assert info["args"] == ["-c", "exit 7"]
    assert info["cwd"] == "/workspace"
    assert info["finished_at"] is not None
    assert set(info["output"]) == {"oldest_seq", "newest_seq", "bytes"}
    listed = any_api.data("GET", f"/v1/sandboxes/{sandbox_id}/processes")["processes"]
    assert [p["process_id"] for p in listed] == [reply["process_id"]]


def test_environment_cwd_and_home(any_api: Api) -> None:
    sandbox_id = any_api.sandbox(envs={"GREETING": "hello", "OTHER": "x"})
    any_api.call(
        "PUT", f"/v1/sandboxes/{sandbox_id}/files", params={"path": "/workspace/sub/f"}, data=b""
    )
    script = 'echo "$GREETING $OTHER $LANG"; echo "$PATH"; pwd; cd ~ && pwd'
    process_id = any_api.process(
        sandbox_id, "bash", "-c", script, cwd="/workspace/sub", env={"GREETING": "hi"}
    )
    lines = output(any_api.frames(sandbox_id, process_id)).decode().splitlines()
    assert lines[0] == "hi x C.UTF-8"
    assert lines[1] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    if any_api.emu.isolation == "bwrap":
        assert lines[2:] == ["/workspace/sub", "/home/user"]
    else:
        assert lines[2:] == [
            str(any_api.emu.sandbox_path(sandbox_id, "/workspace/sub")),
            str(any_api.emu.sandbox_path(sandbox_id, "/home/user")),
        ]


@pytest.mark.parametrize(
    "body",
    [
        {"cmd": "true", "env": {"UNDECLARED": "1"}},
        {"cmd": ""},
        {"cmd": 5},
        {"cmd": "true", "args": "not a list"},
        {"cmd": "true", "cwd": "relative"},
        {"cmd": "true", "cwd": "/workspace/missing"},
        {"cmd": "nul\0"},
    ],
)
def test_bad_process_requests_are_400(api: Api, body: dict[str, object]) -> None:
    sandbox_id = api.sandbox()
    response = api.call("POST", f"/v1/sandboxes/{sandbox_id}/processes", json=body)
    assert response.status_code == 400, response.text


def test_unknown_ids_are_404(api: Api) -> None:
    sandbox_id = api.sandbox()
    for method, tail in [
        ("GET", ""),
        ("DELETE", ""),
        ("GET", "/connect"),
        ("GET", "/wait"),
        ("POST", "/stdin/close"),
    ]:
        path = api.proc_path(sandbox_id, "proc-nope", tail)
        assert api.call(method, path).status_code == 404
    assert api.call("GET", "/v1/sandboxes/sb-nope/processes").status_code == 404


def test_input_and_stdin_close(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    process_id = any_api.process(sandbox_id, "cat")
    for i, chunk in enumerate([b"one ", b"two"], start=1):
        reply = any_api.data(
            "POST",
            any_api.proc_path(sandbox_id, process_id, "/input"),
            json={"data_base64": base64.b64encode(chunk).decode()},
        )
        assert reply["input_seq"] == i
    close = any_api.proc_path(sandbox_id, process_id, "/stdin/close")
    assert any_api.call("POST", close).status_code == 200
    assert any_api.call("POST", close).status_code == 409
    again = any_api.call(
        "POST", any_api.proc_path(sandbox_id, process_id, "/input"), json={"data_base64": "eA=="}
    )
    assert again.status_code == 409
    frames = any_api.frames(sandbox_id, process_id)
    assert output(frames) == b"one two"
    assert frames[-1] == {"type": "exit", "exit_code": 0}


def test_wait_times_out_with_408_then_succeeds(api: Api) -> None:
    sandbox_id = api.sandbox()
    process_id = api.process(sandbox_id, "sleep", "0.5")
    path = api.proc_path(sandbox_id, process_id, "/wait")
    early = api.call("GET", path, params={"timeout_ms": 50})
    assert early.status_code == 408
    assert early.json()["status"] == "fail"
    done = api.data("GET", path, params={"timeout_ms": 20_000, "scope": "tree"})
    assert done["tree_exited"] is True
    assert done["exit_code"] == 0
    assert api.call("GET", path, params={"scope": "everything"}).status_code == 400


def test_delete_kills_grandchildren_and_confirms(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    process_id = any_api.process(sandbox_id, "bash", "-c", "sleep 1000 & sleep 1000 & wait")
    wait_until(lambda: _commands(any_api, process_id).count("sleep 1000") == 2, what="sleeps")
    reply = any_api.data(
        "DELETE", any_api.proc_path(sandbox_id, process_id), params={"grace_ms": 1000}
    )
    assert reply["tree_exited"] is True
    assert reply["leader_exited"] is True
    assert any_api.emu.live_processes() == []
    again = any_api.data("DELETE", any_api.proc_path(sandbox_id, process_id))
    assert again["tree_exited"] is True


def test_a_process_that_left_the_session_is_still_killed(any_api: Api) -> None:
    """``setsid`` escapes a session, not the tree: a PID namespace or a subreaper keeps it."""
    sandbox_id = any_api.sandbox()
    escaped = f"sleep {1000 + secrets.randbelow(10**6)}.5"  # no other test's
    script = f"setsid {escaped} >/dev/null 2>&1 & (setsid {escaped} &); exec sleep 1000"
    process_id = any_api.process(sandbox_id, "bash", "-c", script)
    wait_until(lambda: _commands(any_api, process_id).count(escaped) == 2, what="sleeps")
    reply = any_api.data("DELETE", any_api.proc_path(sandbox_id, process_id))
    assert reply["tree_exited"] is True
    assert any_api.emu.live_processes() == []
    assert escaped not in _host_commands().values()


@pytest.mark.parametrize("streamed", [False, True])
def test_what_an_exec_left_in_the_background_outlives_it_until_destroy(
    any_api: Api, streamed: bool
) -> None:
    """As on the service (the official TypeScript SDK's examples start servers with
    ``nohup ... &`` in an exec, then wait for their port): a finished exec's background
    process lives on, is frozen while its sandbox is paused, and ends with the sandbox."""
    sandbox_id = any_api.sandbox()
    ticks = any_api.emu.sandbox_path(sandbox_id, "/workspace/ticks")
    loop = "while :; do echo t >> /workspace/ticks; sleep 0.02; done"
    script = f"nohup bash -c '{loop}' >/dev/null 2>&1 & echo started"
    body = {"cmd": "bash", "args": ["-c", script]}
    path = f"/v1/sandboxes/{sandbox_id}/exec"
    if streamed:
        reply = any_api.call("POST", path, params={"stream": "true"}, json=body)
        assert reply.ok and b'"exit_code":0' in reply.content.replace(b" ", b"")
    else:
        assert any_api.data("POST", path, json=body)["result"]["stdout"].endswith("started\n")
    grown = _size(ticks)
    wait_until(lambda: _size(ticks) > grown + 4, what="the background loop after the exec")
    assert any_api.emu.live_processes()  # kept in the records: destroy and close find it
    any_api.data("POST", f"/v1/sandboxes/{sandbox_id}/pause")
    any_api.wait_status(sandbox_id, "paused")
    frozen = _size(ticks)
    time.sleep(0.3)
    assert _size(ticks) == frozen
    any_api.data("POST", f"/v1/sandboxes/{sandbox_id}/resume")
    wait_until(lambda: _size(ticks) > frozen, what="ticking again after resume")
    any_api.data("DELETE", f"/v1/sandboxes/{sandbox_id}")
    assert any_api.emu.live_processes() == []


def test_an_exec_whose_client_left_ends_with_its_background(any_api: Api) -> None:
    """A streamed exec is not reconnectable: its client gone before the end, its whole
    tree ends, background included."""
    sandbox_id = any_api.sandbox()
    orphan = f"sleep {1000 + secrets.randbelow(10**6)}.5"  # no other test's
    body = {"cmd": "bash", "args": ["-c", f"setsid {orphan} >/dev/null 2>&1 & exec sleep 1000"]}
    path = f"/v1/sandboxes/{sandbox_id}/exec"
    with any_api.call("POST", path, params={"stream": "true"}, json=body, stream=True) as reply:
        assert reply.ok
        wait_until(lambda: orphan in _host_commands().values(), what="the orphan")
    wait_until(lambda: orphan not in _host_commands().values(), what="the orphan to end")
    wait_until(lambda: any_api.emu.live_processes() == [], what="no process left")


def test_an_exec_without_background_leaves_no_record(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    body = {"cmd": "bash", "args": ["-c", "echo done"]}
    for _ in range(3):
        any_api.data("POST", f"/v1/sandboxes/{sandbox_id}/exec", json=body)
    wait_until(lambda: any_api.emu.live_processes() == [], what="no process left")


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _host_commands() -> dict[int, str]:
    """Every live host process's command line (spaces between its arguments)."""
    found = {}
    for name in os.listdir("/proc"):
        stat = proc_stat(int(name)) if name.isdigit() else None
        if stat is None or stat.state in ("Z", "X"):
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                found[int(name)] = f.read().rstrip(b"\0").replace(b"\0", b" ").decode()
        except OSError:
            pass
    return found


def test_reparented_background_process_is_part_of_the_tree(api: Api) -> None:
    sandbox_id = api.sandbox()
    process_id = api.process(sandbox_id, "bash", "-c", "(sleep 1000 &) ; exit 0")
    info = api.wait_exit(sandbox_id, process_id)
    assert info["exit_code"] == 0
    assert info["tree_exited"] is False or api.emu.isolation == "bwrap"
    reply = api.data("DELETE", api.proc_path(sandbox_id, process_id), params={"grace_ms": 200})
    assert reply["tree_exited"] is True
    assert api.emu.live_processes() == []


def test_sigterm_ignoring_command_is_killed_after_grace(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    process_id = any_api.process(sandbox_id, "bash", "-c", "trap '' TERM; echo ready; sleep 1000")
    with any_api.connect(sandbox_id, process_id) as stream:
        wait_until(lambda: any(b'"data"' in line for line in stream.iter_lines()))
    started = time.monotonic()
    reply = any_api.data(
        "DELETE", any_api.proc_path(sandbox_id, process_id), params={"grace_ms": 300}
    )
    assert time.monotonic() - started >= 0.3
    assert reply["tree_exited"] is True
    assert reply["signal"] == "SIGKILL"
    assert reply["exit_code"] is None
    frames = any_api.frames(sandbox_id, process_id)
    assert frames[-1] == {"type": "exit", "signal": "SIGKILL"}


def test_signal_endpoint_reaches_the_whole_tree(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    process_id = any_api.process(sandbox_id, "bash", "-c", "sleep 1000 & wait")
    wait_until(lambda: "sleep 1000" in _commands(any_api, process_id), what="the child")
    path = any_api.proc_path(sandbox_id, process_id, "/signal")
    assert any_api.call("POST", path, json={"signal": "SIGBOGUS"}).status_code == 400
    assert any_api.call("POST", path, json={"signal": "SIGTERM"}).status_code == 200
    info = any_api.wait_exit(sandbox_id, process_id, scope="tree")
    assert info["signal"] == "SIGTERM"
    assert info["tree_exited"] is True


def test_missing_command_exits_127(any_api: Api) -> None:
    _need_exact_status(any_api)
    sandbox_id = any_api.sandbox()
    process_id = any_api.process(sandbox_id, "no-such-command-here")
    frames = any_api.frames(sandbox_id, process_id)
    assert frames[-1] == {"type": "exit", "exit_code": 127}
    assert b"no-such-command-here" in output(frames, "stderr")
    assert any_api.wait_exit(sandbox_id, process_id)["tree_exited"] is True


class _NoLayer(NoIsolation):
    """An isolation whose launch fails, as one whose sandbox layer cannot be mounted does."""

    def launch(self, *args: object, **kwargs: object) -> Launch:
        raise OSError("the sandbox's overlay could not be mounted")


@pytest.mark.parametrize("size", [None, (24, 80)])
def test_a_launch_that_fails_ends_the_process_and_leaks_no_descriptor(
    tmp_path: Path, size: tuple[int, int] | None
) -> None:
    storage = Storage(tmp_path)
    storage.create()
    process = ManagedProcess(
        "proc-1", "process", Command("true", [], "/workspace", {}), 1 << 16, 1 << 10, size=size
    )
    reader = process.journal.attach(0)
    before = sorted(os.listdir("/proc/self/fd"))
    process.start(_NoLayer(), storage)
    assert sorted(os.listdir("/proc/self/fd")) == before
    assert process.done and process.to_json()["state"] == "failed"
    first, end = reader.next(1.0), reader.next(1.0)
    assert getattr(first, "data", b"") == b"true: the sandbox's overlay could not be mounted\n"
    assert end == End(1, 126, None)
    started = time.monotonic()
    process.stop()  # nothing to wait for
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize(
    ("script", "exit_code", "signal"),
    [
        ("kill -SEGV $$", None, "SIGSEGV"),
        ("kill -KILL $$", None, "SIGKILL"),
        ("exit 139", 139, None),
        ("yes | head -c 1 >/dev/null; exit ${PIPESTATUS[0]}", 141, None),  # SIGPIPE is default
    ],
)
def test_exit_status_is_exact(
    any_api: Api, script: str, exit_code: int | None, signal: str | None
) -> None:
    _need_exact_status(any_api)
    sandbox_id = any_api.sandbox()
    process_id = any_api.process(sandbox_id, "bash", "-c", script)
    info = any_api.wait_exit(sandbox_id, process_id)
    assert (info["exit_code"], info["signal"]) == (exit_code, signal)


def test_exec_buffered_and_streamed(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    exec_path = f"/v1/sandboxes/{sandbox_id}/exec"
    reply = any_api.data(
        "POST",
        exec_path,
        json={"cmd": "bash", "args": ["-c", "cat; echo e >&2; exit 4"], "stdin": "héllo"},
    )
    assert reply["result"] == {"exit_code": 4, "stdout": "héllo", "stderr": "e\n"}
    assert isinstance(reply["exec_ms"], int)
    streamed = any_api.call(
        "POST",
        exec_path,
        params={"stream": "true"},
        json={"cmd": "bash", "args": ["-c", "echo a; echo b >&2"]},
    )
    assert streamed.headers["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in streamed.iter_lines() if line]
    assert {"stdout": "a\n"} in lines
    assert {"stderr": "b\n"} in lines
    assert lines[-1] == {"exit_code": 0}
    assert any_api.data("GET", f"/v1/sandboxes/{sandbox_id}/processes")["processes"] == []


def test_bwrap_sandbox_sees_its_own_root_and_pids(bwrap_api: Api) -> None:
    sandbox_id = bwrap_api.sandbox()
    marker = f"/usr/createos-{sandbox_id}"
    script = f"ls -d /workspace /tmp /home/user; ls /proc | grep -c '^[0-9]'; touch {marker}"
    result = bwrap_api.data(
        "POST", f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "bash", "args": ["-c", script]}
    )["result"]
    lines = result["stdout"].splitlines()
    assert sorted(lines[:3]) == ["/home/user", "/tmp", "/workspace"]
    assert int(lines[3]) < 10  # only the namespace's own processes
    assert not os.path.exists(marker)  # the host's system is never written
    store = bwrap_api.emu._require_store()
    if store.isolation.overlays is None:
        assert "Read-only file system" in result["stderr"]
    else:  # written to the sandbox's own layer, over the host's /usr
        assert result["stderr"] == ""
        # and nothing else: bubblewrap's own mount points (the reporter) stay out of it
        root_layer = store.get(sandbox_id).storage.root / "layer" / "_root"
        assert not (root_layer / "run").exists()


def _need_exact_status(api: Api) -> None:
    """bubblewrap reports exact statuses only when its status reporter could run."""
    isolation = api.emu._require_store().isolation
    if not getattr(isolation, "reports_wait_status", True):
        pytest.skip("the status reporter cannot run inside bubblewrap here")


def _commands(api: Api, process_id: str) -> list[str]:
    """Command lines of the live processes of one tree."""
    found = []
    for live in api.emu.live_processes():
        if live.process_id == process_id:
            for pid in live.pids:
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        found.append(f.read().replace(b"\0", b" ").decode().strip())
                except OSError:
                    pass  # it has just ended
    return found


def _argvs(api: Api) -> list[list[str]]:
    """The command lines of every live process of the emulator's trees, and their parents'."""
    pids = {pid for live in api.emu.live_processes() for pid in live.pids}
    for pid in list(pids):
        stat = proc_stat(pid)
        if stat is not None:
            pids.add(stat.parent)
    argvs = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argvs.append(f.read().decode().split("\0")[:-1])
        except OSError:
            pass
    return argvs


def test_host_ps_shows_the_command_not_the_emulator_s_helper_source(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    process_id = any_api.process(sandbox_id, "sleep", "600")

    def started() -> list[list[str]] | None:
        argvs = _argvs(any_api)
        return argvs if ["sleep", "600"] in argvs else None

    argvs = wait_until(started, "the command")
    # the reporter (not bubblewrap's own command line, which holds "--")
    helpers = [a for a in argvs if a[-2:] == ["sleep", "600"] and "-S" in a and "--" not in a]
    for argv in helpers:  # run from its file: a short prefix, then the command
        assert len(argv) <= 9 and argv[argv.index("-S") + 1].endswith("reporter.py"), argv
    assert helpers or any_api.emu.isolation == "bwrap"  # bwrap may run without a reporter
    assert not any("execvp" in " ".join(argv) for argv in argvs)  # no source code
    any_api.call("DELETE", any_api.proc_path(sandbox_id, process_id))
