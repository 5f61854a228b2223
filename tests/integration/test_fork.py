"""Forks end to end: files copied and independent, paused sources, start_paused, lost answers."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

import createos_sync as cs
from createos_sync import Client, Lease
from createos_sync.emulator import Emulator, Fault
from createos_sync.journal import Journal

from .helpers import operations
from .subprocesses import emulator_env, finish, read_until


def _prepared(box: Lease, tool: str) -> None:
    box.write_file("/workspace/data.txt", b"prepared")
    box.run(f"mkdir -p {tool} && echo tool > {tool}/tool", check=True)


def _layered(emulator: Emulator) -> bool:
    """Whether sandboxes have a writable layer over the system (bubblewrap with overlays)."""
    return getattr(emulator._require_store().isolation, "overlays", None) is not None


def test_fork_of_a_running_sandbox_copies_its_files_and_they_stay_independent(
    emulator: Emulator, box: Lease
) -> None:
    box.write_file("/workspace/data.txt", b"prepared")
    with box.fork() as child:
        assert child.id != box.id
        assert child.info().forked_from == box.id
        assert child.read_file("/workspace/data.txt") == b"prepared"
        child.write_file("/workspace/data.txt", b"changed in the fork")
        box.write_file("/workspace/only-in-source.txt", b"later")
        assert box.read_file("/workspace/data.txt") == b"prepared"
        assert not child.run("test -e /workspace/only-in-source.txt").ok
    assert box.info().status == "running"  # the fork's close never touches its source
    assert child.id not in emulator.live_sandboxes()


def test_fork_of_a_paused_sandbox_leaves_it_paused_and_sees_every_file(
    emulator: Emulator, box: Lease
) -> None:
    # Outside /workspace only with the writable layer: a plain-mode command writes the host.
    tool = "/opt/prepared" if _layered(emulator) else "/workspace/prepared"
    _prepared(box, tool)
    box.pause()
    emulator.clear_request_log()

    with box.fork() as child:
        assert child.run(f"cat /workspace/data.txt {tool}/tool").stdout == "preparedtool\n"
        child.run(f"echo forked > {tool}/tool", check=True)

    assert box.info().status == "paused"
    # The source was asked for one fork and read once; nothing else touched it.
    assert [op for op, _ in operations(emulator, box.id)] == ["sandbox.fork", "sandbox.get"]
    box.resume()
    assert box.run(f"cat {tool}/tool").stdout == "tool\n"


def test_start_paused_gives_a_paused_lease_that_runs_once_resumed(box: Lease) -> None:
    box.write_file("/workspace/data.txt", b"prepared")
    with box.fork(start_paused=True) as child:
        assert child.status == "paused"
        with pytest.raises(cs.SandboxUnavailable, match=r"resume\(\) first"):
            child.run("true")
        child.resume()
        assert child.read_file("/workspace/data.txt") == b"prepared"


def test_cs_lease_fork_from_an_id_in_another_client(client: Client, box: Lease) -> None:
    box.write_file("/workspace/data.txt", b"prepared")
    assert box.id is not None
    with cs.lease(fork_from=box.id, env={"SHARD": "3"}, client=client) as child:
        assert child.run("cat /workspace/data.txt; echo $SHARD").stdout == "prepared3\n"
    assert all(entry.fork_from is None for entry in Journal().entries())  # the fork's is gone


def test_many_threads_fork_one_source_at_once(emulator: Emulator, box: Lease) -> None:
    box.write_file("/workspace/data.txt", b"prepared")
    box.pause()
    seen: list[str] = []
    errors: list[BaseException] = []

    def shard(number: int) -> None:
        try:
            with box.fork(env={"N": str(number)}) as child:
                seen.append(child.run("cat /workspace/data.txt; echo -$N").stdout)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=shard, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert sorted(seen) == [f"prepared-{n}\n" for n in range(6)]


def test_a_lost_fork_answer_is_recovered_and_the_fork_destroyed(
    emulator: Emulator, box: Lease
) -> None:
    emulator.faults.add(Fault("sandbox.fork", drop=True, perform=True))
    before = set(emulator.live_sandboxes())
    emulator.clear_request_log()

    with pytest.raises(cs.CreateosApiError) as caught:
        box.fork()

    assert "was found and destroyed" in str(caught.value)
    assert set(emulator.live_sandboxes()) == before
    # (Status polls, if the fork is still being made when it is found, are left out.)
    assert [op for op, _ in operations(emulator) if op != "sandbox.get"] == [
        "sandbox.fork",  # performed, then the connection was cut
        "sandbox.list",
        "exec",  # its marker, read: this lease's
        "sandbox.delete",
    ]
    assert all(entry.fork_from is None for entry in Journal().entries())


# Lease B, in a process of its own with no journal (as on another machine): forks the
# source, says its id, and runs in its fork once told to.
OTHER_MACHINE = """
import sys
import createos_sync as cs
with cs.lease(fork_from=sys.argv[1], journal=False) as theirs:
    print(theirs.id, flush=True)
    sys.stdin.readline()
    print(theirs.run("echo still mine").stdout, end="", flush=True)
"""


def test_a_lost_fork_never_destroys_another_lease_fork_of_the_same_source(
    emulator: Emulator, box: Lease
) -> None:
    """Issue 22, item 1: lease B (another process, no journal, the URL spelled otherwise)
    forks the source; A's fork is cut before the service acts. A reads B's fork's marker,
    leaves it alone, and says no fork was made; B goes on working in its fork."""
    spelled = emulator.url.replace("127.0.0.1", "LOCALHOST")
    other = subprocess.Popen(
        [sys.executable, "-c", OTHER_MACHINE, str(box.id)],
        env=emulator_env(emulator, CREATEOS_API_URL=spelled),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    theirs = read_until(other, b"\n").decode().strip()
    emulator.faults.add(Fault("sandbox.fork", drop=True))  # not performed: no fork made
    emulator.clear_request_log()

    with pytest.raises(cs.CreateosApiError, match="no fork of it carrying this lease's"):
        box.fork()

    # No answer at all: listed again after two pauses; their fork's marker read once.
    assert [op for op, _ in operations(emulator)] == [
        "sandbox.fork",
        "sandbox.list",
        "exec",
        "sandbox.list",
        "sandbox.list",
    ]
    assert theirs in emulator.live_sandboxes()
    assert other.stdin is not None
    other.stdin.write(b"go\n")
    other.stdin.flush()
    status, out, err = finish(other)
    assert (status, out) == (0, "still mine\n"), err
    assert all(entry.fork_from is None for entry in Journal().entries())


def test_a_fork_refused_with_503_is_sent_again(emulator: Emulator, box: Lease) -> None:
    emulator.faults.add(Fault("sandbox.fork", status=503))
    emulator.clear_request_log()
    with box.fork() as child:
        assert child.status == "running"
    assert [s for op, s in operations(emulator) if op == "sandbox.fork"] == [503, 200]
