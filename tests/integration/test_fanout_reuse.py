"""``cs.map(..., reuse=True)`` on the emulator: a pool of leases, what it costs, when it renews."""

from __future__ import annotations

import collections
import concurrent.futures as cf
import threading

import pytest

import createos_sync as cs
from createos_sync import Client, Lease
from createos_sync.emulator import Emulator, Fault

from .helpers import operations, user_processes


def _counts(emulator: Emulator) -> collections.Counter[str]:
    return collections.Counter(op for op, _ in operations(emulator))


def test_items_run_on_a_pool_of_leases_and_cost_only_their_own_requests(
    emulator: Emulator, client: Client
) -> None:
    emulator.clear_request_log()
    seen: dict[int, str] = {}

    def fn(box: Lease, n: int) -> str:
        seen[n] = box.id or ""
        return box.run(f"echo {n}").stdout

    results = cs.map(fn, range(12), client=client, concurrency=3, reuse=True)
    assert results == [f"{n}\n" for n in range(12)]
    leases = len(set(seen.values()))
    assert 1 <= leases <= 3
    ops = _counts(emulator)
    # request budget: per lease of the pool a creation, its ttl watchdog, its command
    # session (created, its stream attached) and a destroy; per item its run (1), nothing else
    assert ops["sandbox.create"] == ops["sandbox.delete"] == leases
    assert ops["process.create"] == 2 * leases  # the watchdog and the session
    assert ops["process.connect"] == leases
    assert ops["process.input"] == 12
    assert sum(ops.values()) == 5 * leases + 12
    assert not set(seen.values()) & set(emulator.live_sandboxes())


def test_an_item_sees_the_files_of_earlier_items_but_none_of_their_processes(
    emulator: Emulator, client: Client
) -> None:
    def fn(box: Lease, n: int) -> tuple[int, int]:
        lines = box.run(f"echo {n} >> /workspace/seen && wc -l < /workspace/seen").stdout
        leftovers = len(user_processes(emulator))  # what earlier items left running
        box.start("sleep 1000")  # left running: terminated before the next item
        return int(lines), leftovers

    emulator.clear_request_log()
    assert cs.map(fn, range(3), client=client, concurrency=1, reuse=True) == [
        (1, 0), (2, 0), (3, 0)
    ]  # fmt: skip
    ops = _counts(emulator)
    assert ops["sandbox.create"] == 1
    assert ops["process.delete"] == 3  # each item's leftover, terminated once (the last at close)
    assert emulator.live_processes() == []


def test_a_lease_whose_sandbox_failed_is_replaced(emulator: Emulator, client: Client) -> None:
    def fn(box: Lease, n: int) -> str:
        if n == 1:
            emulator.fail_sandbox(box.id or "", "failed")
        return box.run("echo ok").stdout

    emulator.clear_request_log()
    results = cs.map(fn, range(3), client=client, concurrency=1, reuse=True, return_exceptions=True)
    assert results[0] == results[2] == "ok\n"
    assert isinstance(results[1], cs.SandboxUnavailable)
    assert _counts(emulator)["sandbox.create"] == 2  # the failed one was replaced


def test_a_lease_whose_leftover_cannot_be_terminated_is_destroyed_and_replaced(
    emulator: Emulator, client: Client
) -> None:
    def fn(box: Lease, n: int) -> int:
        if n == 0:
            box.start("sleep 1000")
            emulator.faults.add(Fault("process.delete", status=500, times=2))
        box.run("true")
        return n

    emulator.clear_request_log()
    results = cs.map(fn, range(3), client=client, concurrency=1, reuse=True, return_exceptions=True)
    assert isinstance(results[0], cs.CreateosCleanupError)
    assert results[0].sandbox_destroyed is True  # containment unconfirmed: destroyed instead
    assert results[1:] == [1, 2]
    assert _counts(emulator)["sandbox.create"] == 2
    assert emulator.live_processes() == []


def test_the_first_failure_closes_the_pool_too(emulator: Emulator, client: Client) -> None:
    gate = threading.Event()

    def fn(box: Lease, n: int) -> int:
        if n == 3:
            gate.wait(30)
            box.run("exit 7", check=True)
        if n == 2:
            gate.set()
        return n

    emulator.clear_request_log()
    with pytest.raises(cs.CommandFailed, match="command 'exit 7' exited with status 7"):
        cs.map(fn, range(20), client=client, concurrency=2, reuse=True)
    ops = _counts(emulator)
    assert ops["sandbox.create"] == ops["sandbox.delete"] <= 2
    assert emulator.live_sandboxes() == []


def test_reuse_needs_the_items_in_this_process(emulator: Emulator, client: Client) -> None:
    emulator.clear_request_log()
    with cf.ProcessPoolExecutor(1) as pool, pytest.raises(ValueError, match="reuse=True"):
        cs.map(lambda box, n: n, range(3), client=client, reuse=True, executor=pool)
    with pytest.raises(TypeError, match="reuse"):
        cs.map(lambda box, n: n, range(3), client=client, reuse=1)  # type: ignore[arg-type]
    assert emulator.request_log == []


def test_with_setup_the_pool_is_made_of_forks_of_the_setup_sandbox(
    emulator: Emulator, client: Client
) -> None:
    def prepare(box: Lease) -> None:
        box.write_file("/workspace/prepared", b"yes")

    def fn(box: Lease, n: int) -> str:
        return box.read_file("/workspace/prepared").decode() + str(n)

    emulator.clear_request_log()
    results = cs.map(fn, range(6), client=client, concurrency=2, setup=prepare, reuse=True)
    assert results == [f"yes{n}" for n in range(6)]
    ops = _counts(emulator)
    assert ops["sandbox.create"] == 1  # the setup sandbox; the pool's leases fork it
    assert 1 <= ops["sandbox.fork"] <= 2
    assert ops["sandbox.delete"] == ops["sandbox.fork"] + 1
    assert ops["file.read"] == 6
    assert emulator.live_sandboxes() == []
