"""The ttl watchdog end to end: real scripts killed and frozen, the emulator's guest agent.

Short ttls keep these fast (5 to 6 s; the watchdog then looks at its file every second).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from createos_sync import Client, SandboxUnavailable
from createos_sync.emulator import Emulator
from createos_sync.journal import Journal

from ..waiting import wait_until
from .helpers import operations, own_emulator, processes_of
from .subprocesses import emulator_env, read_until

TTL = 5

HOLDER = """\
import sys
import createos_sync as cs
box = cs.lease(ttl={ttl}).open()
print("sandbox", box.id, flush=True)
sys.stdin.readline()  # frozen or killed here
try:
    box.run("true")
except cs.LeaseExpired as exc:
    print("expired:", exc, flush=True)
box.close()
print("closed quietly", flush=True)
"""


def holder(emulator: Emulator, tmp_path: Path, ttl: float) -> tuple[subprocess.Popen[bytes], str]:
    script = tmp_path / "holder.py"
    script.write_text(HOLDER.format(ttl=ttl))
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        env=emulator_env(emulator),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    line = read_until(proc, b"\n").decode()
    return proc, line.split()[1]


@pytest.mark.parametrize("network", ["auto", "shared"])
def test_a_killed_program_leaves_no_sandbox_behind_after_its_ttl(
    network: str, tmp_path: Path
) -> None:
    with own_emulator(network=network) as emulator:
        proc, sandbox_id = holder(emulator, tmp_path, ttl=6)
        proc.kill()  # SIGKILL: no exit hook, no close
        proc.wait()
        killed = time.monotonic()
        assert sandbox_id in emulator.live_sandboxes()
        wait_until(lambda: sandbox_id not in emulator.live_sandboxes(), "the watchdog", 6 + 15)
        assert time.monotonic() - killed >= 3  # not long before the ttl ran out
        wait_until(lambda: not processes_of(emulator, sandbox_id, watchdog=True), "its processes")
        assert Journal().entries()  # the journal still names it: reap would find it gone


def test_a_frozen_program_finds_lease_expired_and_closes_quietly(
    emulator: Emulator, tmp_path: Path
) -> None:
    proc, sandbox_id = holder(emulator, tmp_path, ttl=TTL)
    proc.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: sandbox_id not in emulator.live_sandboxes(), "the watchdog", TTL + 15)
        emulator.clear_request_log()  # while it is frozen: its overdue renewal goes out at once
    finally:
        proc.send_signal(signal.SIGCONT)
    out, err = proc.communicate(b"go\n", timeout=60)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert f"expired: sandbox {sandbox_id} is destroyed: its ttl watchdog" in out.decode()
    assert "closed quietly" in out.decode() and "CreateosCleanupError" not in err.decode()
    # The call that found out: one renewal (404) and one read of the sandbox; close: nothing.
    assert operations(emulator) == [("file.write", 404), ("sandbox.get", 200)]
    assert Journal().entries() == []


def test_an_idle_lease_lives_on_with_one_renewal_per_third_of_its_ttl(
    emulator: Emulator, client: Client
) -> None:
    with client.lease(ttl=TTL) as box:
        emulator.clear_request_log()
        started = time.monotonic()
        renewals = wait_until(
            lambda: (r := operations(emulator, box.id)) and len(r) >= 4 and r, "4 renewals", 60
        )
        elapsed = time.monotonic() - started  # load can only make renewals later, never sooner
        assert box.run("echo alive").stdout == "alive\n"
    assert set(renewals) == {("file.write", 200)}
    assert elapsed >= 3 * TTL / 3 - 0.5  # 4 renewals: at least 3 intervals of ttl/3 apart


def test_kept_at_close_the_sandbox_outlives_its_ttl(emulator: Emulator, client: Client) -> None:
    with client.lease(ttl=TTL, on_exit="keep") as box:
        sandbox_id = box.id
        assert processes_of(emulator, sandbox_id, watchdog=True)  # the watchdog runs
    try:
        assert processes_of(emulator, sandbox_id, watchdog=True) == []  # terminated at close
        time.sleep(TTL + 3)
        assert sandbox_id in emulator.live_sandboxes()
    finally:
        client.destroy(sandbox_id or "")


def test_paused_past_its_ttl_then_resumed_the_sandbox_lives_on(
    emulator: Emulator, client: Client
) -> None:
    with client.lease(ttl=TTL) as box:
        box.pause()
        time.sleep(TTL + 3)
        box.resume()
        time.sleep(3)  # the watchdog has looked at its file again since
        assert box.id in emulator.live_sandboxes()
        assert box.run("echo alive").stdout == "alive\n"


def test_paused_by_the_service_past_its_ttl_then_resumed_the_sandbox_lives_on(
    emulator: Emulator, client: Client
) -> None:
    """leases-ttl.md: a watchdog notices a pause behind its back (auto-pause) and counts again
    from the resume (issue 29: only a pause through the lease was tested)."""

    def settled(want: str) -> bool:
        return client.sandbox(box.id or "").status == want

    with client.lease(ttl=TTL) as box:
        client.request("POST", f"/sandboxes/{box.id}/pause")  # the lease is not told
        wait_until(lambda: settled("paused"), "the pause")
        time.sleep(TTL + 3)
        client.request("POST", f"/sandboxes/{box.id}/resume")
        wait_until(lambda: settled("running"), "the resume")
        time.sleep(3)  # the watchdog has looked at its file again since
        assert box.id in emulator.live_sandboxes()
        assert box.run("echo alive").stdout == "alive\n"


def _ttl_files(emulator: Emulator, sandbox_id: str | None) -> set[str]:
    tmp = emulator.sandbox_path(sandbox_id or "", "/tmp")
    return {p.name for p in tmp.glob(".createos-sync-ttl-*")}


def test_a_fork_runs_a_watchdog_of_its_own_and_the_copied_renewal_file_touches_nothing(
    emulator: Emulator, client: Client
) -> None:
    """A fork copies the disk (its source's renewal file included), never the processes."""
    with client.lease(ttl=TTL) as source:
        [source_dog] = processes_of(emulator, source.id, watchdog=True)
        copied = wait_until(lambda: _ttl_files(emulator, source.id), "a renewal of the source")
        with source.fork(ttl=TTL) as fork:
            [fork_dog] = processes_of(emulator, fork.id, watchdog=True)  # one: its own
            assert fork_dog.process_id != source_dog.process_id
            assert copied <= _ttl_files(emulator, fork.id)  # the copy is there...
            for name in copied:  # ...and neither disarms nor stops the fork's watchdog
                fork.write_file(f"/tmp/{name}", "stop\n")
            time.sleep(TTL + 3)  # nor fires it: the copied file is never renewed in the fork
            assert fork.id in emulator.live_sandboxes()
            alive = [p.process_id for p in processes_of(emulator, fork.id, watchdog=True)]
            assert alive == [fork_dog.process_id]
            own = wait_until(lambda: _ttl_files(emulator, fork.id) - copied, "the fork's renewal")
            assert len(own) == 1 and fork.run("echo alive").stdout == "alive\n"


def test_the_watchdog_is_not_a_process_of_the_users(emulator: Emulator, client: Client) -> None:
    with client.lease(ttl=TTL) as box:
        result = box.run("echo only this")
        assert (result.stdout, result.stderr) == ("only this\n", "")
        [watchdog] = processes_of(emulator, box.id, watchdog=True)
        emulator.clear_request_log()
    closing = operations(emulator, box.id)
    assert closing == [("sandbox.delete", 200)]  # not terminated (nor reported) one by one
    assert watchdog.process_id not in {p.process_id for p in emulator.live_processes()}


AGENT_CALL = """\
url=${CREATEOS_AGENT_URL:-http://127.0.0.1:1029}; a=${url#http://}
exec 3<>"/dev/tcp/${a%:*}/${a##*:}" || exit 9
printf 'POST /self/%s?reason=test HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 0\\r\\n\\r\\n' "$1" >&3
IFS=' ' read -r _ code _ <&3; echo "$code" > "/workspace/agent-$1.txt"
"""


def _agent_deletes_only_its_own_sandbox(emu: Emulator) -> None:
    with emu.client() as client:
        mine = client.lease(ttl=None).open()
        other = client.lease(ttl=None).open()
        try:
            other.start(["bash", "-c", AGENT_CALL, "agent", "pause"])
            wait_until(lambda: emu._require_store().get(other.id or "").settle() == "paused",
                       "the self-pause")  # fmt: skip
            other.resume()  # the caller was frozen with its sandbox: now it notes the answer
            answer = emu.sandbox_path(other.id or "", "/workspace/agent-pause.txt")
            assert wait_until(lambda: answer.exists() and answer.read_text()) == "202\n"
            mine.start(["bash", "-c", AGENT_CALL, "agent", "delete"])
            wait_until(lambda: mine.id not in emu.live_sandboxes(), "the self-delete")
            assert other.id in emu.live_sandboxes()  # paused, and only paused
        finally:
            mine.close()
            other.close()


# Deletes its own sandbox through the guest agent, as the ttl watchdog does, then waits
# to be killed with it.
DIES_WITH_ITS_SANDBOX = AGENT_CALL + "exec sleep 100\n"


@pytest.mark.parametrize("how", ["run", "Process.wait"])
def test_a_command_killed_with_its_sandbox_raises_sandbox_unavailable(
    emulator: Emulator, client: Client, how: str
) -> None:
    """Issue 22, item 4: not an ordinary ``RunResult(signal='SIGKILL')``; the sandbox is
    read once on that path, and every later call names it too (not an HTTP 404)."""
    with client.lease(ttl=None) as box:
        emulator.clear_request_log()
        command = ["bash", "-c", DIES_WITH_ITS_SANDBOX, "agent", "delete"]
        with pytest.raises(SandboxUnavailable, match=f"sandbox {box.id} is destroy(ing|ed)"):
            if how == "run":
                box.run(command)
            else:
                box.start(command).wait()
        assert [op for op, _ in operations(emulator, box.id)][-1] == "sandbox.get"  # one read
        assert [op for op, _ in operations(emulator, box.id)].count("sandbox.get") == 1
        with pytest.raises(SandboxUnavailable, match=f"sandbox {box.id} is destroy(ing|ed)"):
            box.run("true")


def test_the_guest_agent_acts_on_its_own_sandbox_only(emulator: Emulator) -> None:
    _agent_deletes_only_its_own_sandbox(emulator)  # private where this machine allows


def test_the_guest_agent_acts_on_its_own_sandbox_only_on_a_shared_network() -> None:
    with own_emulator(network="shared") as emu:
        assert emu.network == "shared"
        _agent_deletes_only_its_own_sandbox(emu)


def test_egress_works_from_a_sandbox_with_a_private_network(
    emulator: Emulator, client: Client
) -> None:
    if emulator.network != "private":
        pytest.skip(f"this machine gives sandboxes no private network ({emulator.network})")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.sendall(b"hello from the host")

    threading.Thread(target=answer, daemon=True).start()
    # slirp4netns's NAT: the host's loopback is 10.0.2.2, as any other outside address would be.
    fetch = f"import socket; print(socket.create_connection(('10.0.2.2', {port}), 10).recv(99))"
    try:
        with client.lease(ttl=None) as box:
            assert box.run(["python3", "-c", fetch]).stdout == "b'hello from the host'\n"
            # Its loopback is its own: the host's listener is not at 127.0.0.1 there.
            assert not box.run(f"exec 3<>/dev/tcp/127.0.0.1/{port}").ok
    finally:
        listener.close()


def test_cli_run_ttl(emulator: Emulator) -> None:
    env = emulator_env(emulator)
    for ttl, watchdogs in (("0", 0), ("7", 1)):
        emulator.clear_request_log()
        done = subprocess.run(
            [sys.executable, "-m", "createos_sync", "run", "--ttl", ttl, "--", "echo hi"],
            env=env, capture_output=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0 and done.stdout == b"hi\n", done.stderr
        assert [op for op, _ in operations(emulator)].count("process.create") == 1 + watchdogs
    bad = subprocess.run(
        [sys.executable, "-m", "createos_sync", "run", "--ttl", "2", "--", "true"],
        env=env, capture_output=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and b"at least 5 seconds" in bad.stderr
