"""Nothing leaks even after a crash: the lease journal, ``reap``, and ``max_lifetime``."""

from __future__ import annotations

import signal
import sys

import attrs
import pytest

import createos_sync as cs
from createos_sync import _api, reap
from createos_sync._deadline import Deadline
from createos_sync._journal import Entry, Journal
from createos_sync.emulator import Emulator, Fault

from .subprocesses import CLI, emulator_env, finish, read_until, spawn, wait_until

# A user's script that is killed (SIGKILL: no exit hook runs) while its lease is open.
DOOMED_SCRIPT = """
import time
import createos_sync as cs
box = cs.lease().open()
box.start("sleep 1000")
print(box.id, flush=True)
time.sleep(1000)
"""
# No live process started at boot: an entry naming it can never have a live owner.
DEAD_OWNER = {"pid": 2**22 + 1, "process_start": "0"}


def test_reap_destroys_the_sandbox_of_a_killed_script(emulator: Emulator) -> None:
    env = emulator_env(emulator)
    first, second = (spawn([sys.executable, "-c", DOOMED_SCRIPT], env) for _ in range(2))
    first_id, second_id = (read_until(p, b"\n").decode().strip() for p in (first, second))
    first.send_signal(signal.SIGKILL)
    finish(first)
    assert {first_id, second_id} <= set(emulator.live_sandboxes())
    assert {p.sandbox_id for p in emulator.live_processes()} == {first_id, second_id}

    with emulator.client() as client:
        outcomes = {o.sandbox_ids: o for o in reap(client)}
    assert outcomes[(first_id,)].action == "destroyed"
    assert outcomes[(second_id,)].action == "skipped"  # its owner still runs
    assert first_id not in emulator.live_sandboxes()
    assert [e.sandbox_id for e in Journal().entries()] == [second_id]

    # the same through the CLI, in a subprocess with the script's environment
    second.send_signal(signal.SIGKILL)
    finish(second)
    status, out, err = finish(spawn([*CLI, "reap"], env))
    assert status == 0, err
    assert out.startswith(f"destroyed {second_id}: its owner (process {second.pid}) is gone")
    assert second_id not in emulator.live_sandboxes()
    assert emulator.live_processes() == []
    assert Journal().entries() == []


def test_reap_resolves_entries_by_name_and_leaves_what_is_not_its_own(
    emulator: Emulator, client: cs.Client
) -> None:
    journal = Journal()
    # The owner died while the creation was in flight: only the name is known.
    created = _api.create_sandbox(
        client.transport, {"shape": "s-1vcpu-1gb", "name": "orphan-1"}, Deadline.after(30)
    )
    url = client.config.base_url
    journal.add(Entry(name="orphan-1", base_url=url, **DEAD_OWNER))
    journal.add(Entry(name="never-created", base_url=url, **DEAD_OWNER))
    journal.add(Entry(name="elsewhere", base_url="https://api.example", **DEAD_OWNER))
    journal.add(Entry(name="mine", base_url=url, sandbox_id="sbx-held"))  # this process: alive
    journal.add(Entry(name="other-host", base_url=url, sandbox_id="sbx-x", host="not-this-host"))

    dry = {o.name: o.action for o in reap(client, dry_run=True)}
    assert dry == {
        "orphan-1": "would destroy",
        "never-created": "would forget",
        "elsewhere": "skipped",
        "mine": "skipped",
        "other-host": "skipped",
    }
    assert len(journal.entries()) == 5
    assert created["id"] in emulator.live_sandboxes()

    outcomes = {o.name: o for o in reap(client)}
    assert outcomes["orphan-1"].action == "destroyed"
    assert outcomes["orphan-1"].sandbox_ids == (created["id"],)
    assert outcomes["never-created"].action == "forgotten"
    assert "CREATEOS_API_URL=https://api.example" in outcomes["elsewhere"].reason
    assert created["id"] not in emulator.live_sandboxes()
    assert sorted(e.name for e in journal.entries()) == ["elsewhere", "mine", "other-host"]


def test_reap_keeps_an_entry_whose_destroy_failed(emulator: Emulator, client: cs.Client) -> None:
    journal = Journal()
    with client.lease(on_exit="keep") as box:
        sandbox_id = box.id
    assert sandbox_id is not None
    url = client.config.base_url
    journal.add(Entry(name="n", base_url=url, sandbox_id=sandbox_id, **DEAD_OWNER))
    emulator.faults.add(Fault("sandbox.delete", status=400))
    (failed,) = reap(client)
    assert failed.action == "failed" and "HTTP 400" in failed.reason
    assert [e.name for e in journal.entries()] == ["n"]
    (destroyed,) = reap(client)
    assert destroyed.action == "destroyed"
    assert journal.entries() == []
    assert sandbox_id not in emulator.live_sandboxes()


def test_max_lifetime_closes_an_idle_lease(emulator: Emulator, client: cs.Client) -> None:
    box = client.lease(max_lifetime=1).open()
    sandbox_id = box.id
    wait_until(lambda: box.closed, "the lease expired")
    assert sandbox_id not in emulator.live_sandboxes()
    assert Journal().entries() == []
    with pytest.raises(cs.LeaseClosed, match="max_lifetime"):
        box.run("true")
    box.close()  # idempotent, and nothing pending


def test_max_lifetime_ends_a_run_in_progress_as_timed_out(
    emulator: Emulator, client: cs.Client
) -> None:
    with client.lease(max_lifetime=1) as box:
        result = box.run("echo started; sleep 100")
    assert result.timed_out and result.exit_code is None
    assert result.stdout == "started\n"
    assert box.closed and box.id not in emulator.live_sandboxes()
    assert emulator.live_processes() == []


def test_max_lifetime_terminates_background_processes(
    emulator: Emulator, client: cs.Client
) -> None:
    box = client.lease(max_lifetime=1).open()
    process = box.start("sleep 100")
    result = process.wait(timeout=60)
    assert result.timed_out
    wait_until(lambda: box.closed, "the lease expired")
    assert box.id not in emulator.live_sandboxes()
    assert emulator.live_processes() == []


def test_journal_entries_are_written_around_creation_and_removed_on_close(
    client: cs.Client,
) -> None:
    with client.lease() as box:
        (entry,) = Journal().entries()
        assert entry.sandbox_id == box.id
        assert attrs.asdict(entry)["base_url"] == client.config.base_url
        assert entry.owner_alive() is True
    assert Journal().entries() == []


def test_reap_finds_the_fork_a_dead_process_was_making(
    emulator: Emulator, client: cs.Client
) -> None:
    url, journal = client.config.base_url, Journal()
    with client.lease() as source, source.fork() as claimed:
        # A process died while its fork was in flight: only the source and the time are known.
        journal.add(Entry(name="fork-in-flight", base_url=url, fork_from=source.id, **DEAD_OWNER))
        orphan = _api.fork_sandbox(client.transport, str(source.id), {}, Deadline.after(30))["id"]
        outcomes = {o.name: o for o in reap(client)}
        assert outcomes["fork-in-flight"].action == "destroyed"
        assert outcomes["fork-in-flight"].sandbox_ids == (orphan,)  # not the claimed fork
        assert claimed.id in emulator.live_sandboxes()
        assert orphan not in emulator.live_sandboxes()
