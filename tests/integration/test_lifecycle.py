"""Leases end to end: open/close budget, pause/resume, on_exit, destroy, files, Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

import createos_sync as cs
from createos_sync import Client, Lease
from createos_sync._commands.session import SWITCH as SESSION_SWITCH
from createos_sync.emulator import Emulator, Fault

from ..waiting import wait_until
from .helpers import (
    FAST,
    UrlRecorder,
    operations,
    own_emulator,
    proc_state,
    processes_of,
    sha256,
)

REPO = Path(__file__).resolve().parents[2]

# --- request budget of a lease (docs/reference/request-costs.md) ---------------


def test_open_and_close_cost_three_requests_with_no_status_poll(emulator: Emulator) -> None:
    """A creation answers once the sandbox runs, as on the service: nothing to poll."""
    recorder = UrlRecorder()
    with emulator.client(requests_per_minute=FAST, session=recorder.session) as client:
        emulator.clear_request_log()
        with client.lease() as lease:
            opened = operations(emulator)
            sandbox_id = lease.id
            assert lease.status == "running"
        closed = operations(emulator)[len(opened) :]

    watchdog = [("process.create", 200)]  # the ttl watchdog, once the sandbox runs
    assert opened == [("sandbox.create", 200), *watchdog]
    assert closed == [("sandbox.delete", 200)]
    assert recorder.sandbox_states == ["running"]  # the creation's answer
    assert sandbox_id not in emulator.live_sandboxes()


def test_open_and_close_of_an_instantly_running_sandbox_cost_three_requests() -> None:
    with (
        own_emulator(transition_delay=0) as emu,
        emu.client(requests_per_minute=FAST) as client,
    ):
        emu.clear_request_log()
        with client.lease() as lease:
            assert lease.status == "running"
        assert operations(emu) == [
            ("sandbox.create", 200), ("process.create", 200), ("sandbox.delete", 200)
        ]  # fmt: skip
        emu.clear_request_log()
        with client.lease(ttl=None):
            pass
        assert operations(emu) == [("sandbox.create", 200), ("sandbox.delete", 200)]


# --- pause / resume --------------------------------------------------------


COUNTER = "n=0; while :; do n=$((n+1)); echo $n > count.tmp && mv count.tmp count; sleep 0.02; done"


def _count(emulator: Emulator, sandbox_id: str) -> int:
    try:
        text = emulator.sandbox_path(sandbox_id, "/workspace/count").read_text()
    except FileNotFoundError:
        return 0
    return int(text)


def test_pause_freezes_processes_and_resume_keeps_files(emulator: Emulator, client: Client) -> None:
    with client.lease(ttl=None) as box:  # no watchdog: the sandbox's processes are the counter's
        _pause_freezes_processes_and_resume_keeps_files(emulator, box)


def _pause_freezes_processes_and_resume_keeps_files(emulator: Emulator, box: Lease) -> None:
    sandbox_id = box.id
    assert sandbox_id is not None
    box.write_file("/workspace/kept.txt", b"still here")
    counter = box.start(COUNTER)
    wait_until(lambda: _count(emulator, sandbox_id) > 0, what="the counter to start")
    monitor = _monitor_pid(emulator, sandbox_id, counter.id)

    def command_pids() -> list[int]:
        # Under bubblewrap the monitor outside the namespace is not part of the command.
        return [pid for p in processes_of(emulator, sandbox_id) for pid in p.pids if pid != monitor]

    info = box.pause()

    assert info.status == "paused" == box.status
    # Frozen, as the kernel sees it: every process of the command is stopped.
    frozen = wait_until(
        lambda: (pids := command_pids()) and all(proc_state(pid) == "T" for pid in pids) and pids,
        what="every process of the counter to be stopped",
    )
    frozen_at = _count(emulator, sandbox_id)
    assert command_pids() == frozen
    assert all(proc_state(pid) == "T" for pid in frozen)
    assert _count(emulator, sandbox_id) == frozen_at

    info = box.resume()

    assert info.status == "running" == box.status
    wait_until(lambda: _count(emulator, sandbox_id) > frozen_at, what="the counter to go on")
    assert box.read_file("/workspace/kept.txt") == b"still here"
    assert counter.running


def _monitor_pid(emulator: Emulator, sandbox_id: str, process_id: str) -> int | None:
    """Under bubblewrap, the pid the emulator started is bubblewrap's monitor, outside the tree."""
    if emulator.isolation != "bwrap":
        return None
    answer = requests.get(
        f"{emulator.url}/v1/sandboxes/{sandbox_id}/processes/{process_id}",
        headers={"X-Api-Key": emulator.api_key},
        timeout=30,
    )
    answer.raise_for_status()
    pid: int = answer.json()["data"]["pid"]
    return pid


# --- on_exit ---------------------------------------------------------------


def test_on_exit_pause_then_reattach_by_id_with_files_intact(
    emulator: Emulator, client: Client
) -> None:
    with client.lease(on_exit="pause") as first:
        sandbox_id = first.id
        assert sandbox_id is not None
        first.write_file("/workspace/notes.txt", "ünïcødé notes")
        first.start("sleep 1000")

    assert first.closed
    assert client.sandbox(sandbox_id).status == "paused"
    assert processes_of(emulator, sandbox_id) == []  # its processes were terminated first

    with client.lease(sandbox_id=sandbox_id, on_exit="destroy") as again:
        assert again.id == sandbox_id
        assert again.status == "running"
        assert again.read_file("/workspace/notes.txt") == "ünïcødé notes".encode()
        assert again.run("cat notes.txt").stdout == "ünïcødé notes"

    assert sandbox_id not in emulator.live_sandboxes()


def test_on_exit_keep_leaves_the_sandbox_running_without_processes(
    emulator: Emulator, client: Client
) -> None:
    with client.lease(on_exit="keep") as lease:
        sandbox_id = lease.id
        assert sandbox_id is not None
        lease.write_file("/workspace/kept", b"1")
        lease.start("sleep 1000 & sleep 1000 & wait")

    try:
        assert client.sandbox(sandbox_id).status == "running"
        assert processes_of(emulator, sandbox_id) == []
        with client.lease(sandbox_id=sandbox_id) as again:  # attaching defaults to keep
            assert again.read_file("/workspace/kept") == b"1"
        assert client.sandbox(sandbox_id).status == "running"
    finally:
        client.destroy(sandbox_id)
    assert sandbox_id not in emulator.live_sandboxes()


def test_close_may_choose_on_exit_at_the_end(emulator: Emulator, client: Client) -> None:
    lease = client.lease().open()  # made by the lease: destroy, unless close() says otherwise
    sandbox_id = lease.id
    assert sandbox_id is not None
    lease.start("sleep 1000")

    lease.close(on_exit="keep")

    try:
        assert client.sandbox(sandbox_id).status == "running"
        assert processes_of(emulator, sandbox_id, watchdog=True) == []  # the ttl's too
        with pytest.raises(ValueError, match="on_exit"):
            client.lease().close(on_exit="forget")  # type: ignore[arg-type]
    finally:
        client.destroy(sandbox_id)


def test_destroy_leaves_no_process_behind(emulator: Emulator, client: Client) -> None:
    with client.lease(ttl=None) as lease:  # no watchdog: the test counts the sandbox's processes
        sandbox_id = lease.id
        storage = emulator.sandbox_path(sandbox_id or "", "/workspace")
        lease.start("sleep 1000 & sleep 1000 & wait")
        lease.start("trap '' TERM; sleep 1000")  # ignores SIGTERM: needs the SIGKILL
        assert len(processes_of(emulator, sandbox_id)) == 2

    assert processes_of(emulator, sandbox_id) == []
    assert sandbox_id not in emulator.live_sandboxes()
    assert not storage.exists()


def test_destroy_from_elsewhere_kills_processes_the_lease_still_runs(
    emulator: Emulator, client: Client
) -> None:
    lease = client.lease(on_exit="keep", ttl=None).open()  # no watchdog among its processes
    try:
        lease.start("sleep 1000")
        assert len(processes_of(emulator, lease.id)) == 1

        client.destroy(lease.id or "")

        assert processes_of(emulator, lease.id) == []
        assert lease.id not in emulator.live_sandboxes()
    finally:
        lease.close()  # the sandbox is gone: terminations and destroy answer 404, fine
    assert lease.closed


def test_close_is_idempotent_and_a_closed_lease_refuses_work(client: Client) -> None:
    lease = client.lease().open()
    lease.close()
    lease.close()

    with pytest.raises(cs.LeaseClosed, match="this lease is closed"):
        lease.run("true")
    with pytest.raises(cs.LeaseClosed, match="leases cannot be reopened"):
        lease.open()


def test_a_process_of_a_closed_lease_refuses_send_and_resize_without_a_request(
    emulator: Emulator, client: Client
) -> None:
    """Issue 22, item 7: not a request answered 404."""
    lease = client.lease().open()
    process = lease.start("sleep 1000", pty=True)
    lease.close()
    emulator.clear_request_log()
    with pytest.raises(cs.LeaseClosed, match=f"process {process.id}"):
        process.send("hello\r")
    with pytest.raises(cs.LeaseClosed, match=f"process {process.id}"):
        process.resize(30, 90)
    assert operations(emulator) == []


IDLE_THREADS = frozenset({"createos-cutoff", "createos-background"})


def _idle_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name in IDLE_THREADS}


def test_no_thread_of_the_package_outlives_its_leases_and_clients(emulator: Emulator) -> None:
    """Issue 22, item 13: started when needed, ended when idle, started again on next use."""
    for _ in range(2):
        with emulator.client(requests_per_minute=FAST) as client, client.lease(ttl=60) as box:
            box.run("true")
            assert _idle_threads() == IDLE_THREADS  # deadlines on the wire; ttl renewals
        wait_until(lambda: not _idle_threads(), "the package's threads to end", 30)


# --- files -----------------------------------------------------------------


FIVE_MIB = 5 * 1024 * 1024


@pytest.fixture(scope="module")
def random_5mib() -> bytes:
    return os.urandom(FIVE_MIB)


def test_binary_file_round_trip_with_write_and_read(box: Lease, random_5mib: bytes) -> None:
    box.write_file("/workspace/blob.bin", random_5mib)

    assert box.read_file("/workspace/blob.bin") == random_5mib
    remote = box.run(["sha256sum", "blob.bin"], check=True).stdout.split()[0]
    assert remote == sha256(random_5mib)


def test_binary_file_round_trip_with_upload_and_download(
    box: Lease, random_5mib: bytes, tmp_path: Path
) -> None:
    source = tmp_path / "up.bin"
    source.write_bytes(random_5mib)
    target = tmp_path / "down.bin"

    box.upload(source, "/tmp/up.bin")
    box.download("/tmp/up.bin", target)

    assert sha256(target.read_bytes()) == sha256(random_5mib)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["down.bin", "up.bin"]


# --- a real Ctrl-C -----------------------------------------------------------


SIGINT_SCRIPT = textwrap.dedent(
    """\
    import createos_sync as cs

    with cs.lease(client=cs.Client(requests_per_minute=100_000)) as box:
        print(box.id, flush=True)
        box.run("sleep 1000")
    """
)


@contextlib.contextmanager
def _script_in_run(
    emulator: Emulator, *, session: bool = False
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A separate Python process inside ``box.run("sleep 1000")``, and its sandbox id; the
    command runs as a managed process of its own, or with ``session`` in the lease's
    command session."""
    env = {
        **os.environ,
        "CREATEOS_API_URL": emulator.url,
        "CREATEOS_API_KEY": emulator.api_key,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        SESSION_SWITCH: "1" if session else "0",
    }
    released = ("process.input", 200) if session else ("process.stdin_close", 200)
    child = subprocess.Popen(
        [sys.executable, "-c", SIGINT_SCRIPT],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stderr is not None
        sandbox_id = child.stdout.readline().strip()
        assert sandbox_id.startswith("sb-"), child.stderr.read()
        # Following its output (gate released): `sleep 1000` is what runs now.
        wait_until(
            lambda: (
                released in operations(emulator, sandbox_id) and processes_of(emulator, sandbox_id)
            ),
            what="the command to run",
        )
        yield child, sandbox_id
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()


def test_sigint_during_run_terminates_the_process_and_destroys_the_sandbox(
    emulator: Emulator,
) -> None:
    with _script_in_run(emulator) as (child, sandbox_id):
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=60)

    assert child.returncode != 0
    assert "KeyboardInterrupt" in stderr
    assert processes_of(emulator, sandbox_id) == []
    assert sandbox_id not in emulator.live_sandboxes()
    ops = operations(emulator, sandbox_id)
    assert ("process.delete", 200) in ops  # the run terminated its process...
    assert ops[-1] == ("sandbox.delete", 200)  # ...then the lease destroyed the sandbox


def test_sigint_during_a_session_run_ends_the_command_and_destroys_the_sandbox(
    emulator: Emulator,
) -> None:
    with _script_in_run(emulator, session=True) as (child, sandbox_id):
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=60)

    assert child.returncode != 0
    assert "KeyboardInterrupt" in stderr
    assert processes_of(emulator, sandbox_id) == []
    assert sandbox_id not in emulator.live_sandboxes()
    ops = operations(emulator, sandbox_id)
    assert ops.count(("process.input", 200)) == 2  # the command, then ending it...
    assert ops[-1] == ("sandbox.delete", 200)  # ...then the lease destroyed the sandbox


def test_second_sigint_during_termination_destroys_the_sandbox_at_once() -> None:
    # Its own emulator: the stalled answer below outlives the test.
    with own_emulator() as emu, _script_in_run(emu) as (child, sandbox_id):
        # The termination is carried out, but its answer stalls far longer than this test.
        emu.faults.add(Fault("process.delete", delay=60))
        child.send_signal(signal.SIGINT)
        wait_until(lambda: not emu.faults.pending(), what="the termination request")

        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=30)  # well before the stalled answer

        assert child.returncode != 0
        assert "KeyboardInterrupt" in stderr
        assert "destroying the sandbox" in stderr  # the escalation, logged as a warning
        assert sandbox_id not in emu.live_sandboxes()
        assert processes_of(emu, sandbox_id) == []
        assert operations(emu, sandbox_id)[-1] == ("sandbox.delete", 200)


def test_the_escape_hatch_reaches_an_endpoint_the_package_does_not_wrap(
    emulator: Emulator, client: Client
) -> None:
    with client.lease() as box:
        emulator.clear_request_log()
        whoami = client.request("GET", "/whoami")
        assert operations(emulator) == [("whoami", 200)]  # 1 request
        assert whoami["stats"]["running"] >= 1 and isinstance(whoami["user_id"], str)
        sandbox = client.request("GET", f"/sandboxes/{box.id}")
        assert sandbox["id"] == box.id and sandbox["status"] == "running"
        emulator.faults.add(Fault("whoami", status=503))
        assert client.request("GET", "/v1/whoami")["user_id"] == whoami["user_id"]  # retried
        with pytest.raises(cs.CreateosApiError, match="HTTP 400 during API request") as caught:
            client.request("POST", "/sandboxes", json={"shape": "s-0vcpu-0gb"})
        assert caught.value.server_message == "unknown shape"
        assert str(caught.value).startswith("HTTP 400 during API request (request id req-")
