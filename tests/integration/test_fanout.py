"""``cs.map`` end to end on the emulator: order, the concurrency cap, laziness, failures, Ctrl-C."""

from __future__ import annotations

import collections
import concurrent.futures as cf
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import createos_sync as cs
from createos_sync import Client, Lease
from createos_sync.emulator import Emulator, Fault

from ..waiting import wait_until
from .helpers import operations, own_emulator, processes_of, user_processes
from .subprocesses import emulator_env, finish, read_until, spawn


def _creations(emulator: Emulator) -> list[str]:
    return [r.operation or "" for r in emulator.request_log if r.operation == "sandbox.create"]


def test_results_come_in_input_order_each_item_in_a_sandbox_of_its_own(
    emulator: Emulator, client: Client
) -> None:
    emulator.clear_request_log()
    seen: dict[int, str] = {}

    def fn(box: Lease, n: int) -> str:
        seen[n] = box.id or ""
        # later items finish first
        return box.run(f"sleep {0.05 * (5 - n)}; echo {n * n}").stdout.strip()

    assert cs.map(fn, range(6), client=client, concurrency=6) == ["0", "1", "4", "9", "16", "25"]
    assert len(set(seen.values())) == 6  # six sandboxes
    ops = collections.Counter(op for op, _ in operations(emulator))
    # request budget: per item one creation, its ttl watchdog, one destroy, and what fn
    # sent (a run: 3)
    assert ops["sandbox.create"] == ops["sandbox.delete"] == 6
    assert ops["process.create"] == 6 + 6
    assert sum(ops.values()) == 6 * 6  # no status poll: a creation answers once it runs
    assert not set(seen.values()) & set(emulator.live_sandboxes())


def test_never_more_than_concurrency_leases_at_once(emulator: Emulator, client: Client) -> None:
    lock = threading.Lock()
    active = peak = 0

    def fn(box: Lease, n: int) -> int:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        try:
            assert len(emulator.live_sandboxes()) <= 3
            box.run("sleep 0.2")
            return n
        finally:
            with lock:
                active -= 1

    assert cs.map(fn, range(9), client=client, concurrency=3) == list(range(9))
    assert peak == 3


def test_a_generator_is_consumed_lazily(client: Client) -> None:
    lock = threading.Lock()
    pulled = finished = 0
    ahead: list[int] = []

    def items() -> Iterator[int]:
        nonlocal pulled
        for n in range(12):
            with lock:
                pulled += 1
                ahead.append(pulled - finished)  # this one included
            yield n

    def fn(box: Lease, n: int) -> int:
        nonlocal finished
        box.run("true")
        with lock:
            finished += 1
        return n

    assert cs.map(fn, items(), client=client, concurrency=3) == list(range(12))
    assert max(ahead) == 3  # never more than `concurrency` items pulled and unfinished


def test_return_exceptions_puts_each_failure_in_its_place(
    emulator: Emulator, client: Client
) -> None:
    def fn(box: Lease, n: int) -> int:
        box.run(f"exit {n % 3}", check=True)
        return n

    results = cs.map(fn, range(7), client=client, concurrency=3, return_exceptions=True)
    assert [r if isinstance(r, int) else type(r) for r in results] == [
        0, cs.CommandFailed, cs.CommandFailed, 3, cs.CommandFailed, cs.CommandFailed, 6
    ]  # fmt: skip
    assert [r.result.exit_code for r in results if isinstance(r, cs.CommandFailed)] == [1, 2, 1, 2]
    assert len(_creations(emulator)) >= 7


def test_the_first_failure_stops_new_items_and_closes_the_running_ones(
    emulator: Emulator, client: Client
) -> None:
    emulator.clear_request_log()
    started: list[int] = []

    def fn(box: Lease, n: int) -> None:
        started.append(n)
        if n == 2:
            box.run("exit 7", check=True)
        box.run("sleep 1000")  # only stopping can end it

    t0 = time.monotonic()
    with pytest.raises(cs.CommandFailed) as raised:
        cs.map(fn, range(50), client=client, concurrency=3)
    assert time.monotonic() - t0 < 30
    assert raised.value.result.exit_code == 7
    notes = raised.value.__notes__
    assert "cs.map: item 2 failed; no new item was started after it" in notes
    assert any(n.startswith("cs.map: items running when it stopped, closed: 0 (") for n in notes)
    assert sorted(started) == [0, 1, 2]
    assert len(_creations(emulator)) == 3
    assert emulator.live_processes() == []  # `sleep 1000` terminated, not waited for


def test_a_failing_iterable_stops_the_map_and_closes_what_runs(client: Client) -> None:
    def items() -> Iterator[int]:
        yield 0
        yield 1
        raise LookupError("no more items")

    def fn(box: Lease, n: int) -> None:
        box.run("sleep 1000")

    with pytest.raises(LookupError, match="no more items"):
        cs.map(fn, items(), client=client, concurrency=4)


def test_a_user_thread_pool_runs_the_items_in_this_process(client: Client) -> None:
    with ThreadPoolExecutor(2) as pool:
        names = cs.map(
            lambda box, n: (n, threading.current_thread().name),
            range(4),
            client=client,
            executor=pool,
        )
    assert [n for n, _ in names] == [0, 1, 2, 3]
    assert all(name.startswith("ThreadPoolExecutor") for _, name in names)


class _LikeDask(cf.Executor):
    """Runs each task in a thread of its own, its future as Dask's executor keeps it.

    Such a future is never marked running, so ``cancel()`` succeeds even while
    its task runs, which then runs on; and once cancelled it is never reported
    done to ``cf.wait`` (the task's outcome cannot be set on it any more).
    """

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        future: cf.Future[Any] = cf.Future()

        def work() -> None:
            with contextlib.suppress(cf.InvalidStateError):  # cancelled meanwhile
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:
                    future.set_exception(exc)

        self.threads.append(threading.Thread(target=work, daemon=True))
        self.threads[-1].start()
        return future


def test_a_failure_never_waits_on_a_cancelled_remote_item(
    emulator: Emulator, client: Client
) -> None:
    """The first failure cancels a remote item that runs: cs.map raises, the item closes itself."""
    executor = _LikeDask()
    running, release = threading.Event(), threading.Event()
    raised: list[BaseException] = []

    def fn(box: Lease, n: int) -> int:
        if n == 0:
            running.set()
            release.wait(60)
            return n
        assert running.wait(60)
        raise LookupError(f"item {n} fails")

    def call() -> None:
        try:
            cs.map(fn, [0, 1], client=client, executor=executor)
        except LookupError as exc:
            raised.append(exc)

    coordinator = threading.Thread(target=call, daemon=True)
    coordinator.start()
    try:
        coordinator.join(30)
        assert not coordinator.is_alive(), "cs.map waits on a cancelled future for ever"
        assert [str(exc) for exc in raised] == ["item 1 fails"]
        assert len(emulator.live_sandboxes()) == 1  # item 0 runs on, its lease open
    finally:
        release.set()
    for thread in executor.threads:
        thread.join(30)
    assert emulator.live_sandboxes() == []  # item 0 closed its lease itself when fn returned


def test_a_progress_line_when_output_is_not_a_terminal(
    client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    cs.map(lambda box, n: n, (n for n in range(3)), client=client, progress=True)
    err = capsys.readouterr().err
    assert "cs.map: 3 finished (3 done, 0 failed), 0 running" in err
    cs.map(lambda box, n: n, range(3), client=client)  # progress=None: not a terminal
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"concurrency": 0}, ValueError, "concurrency must be an integer >= 1"),
        ({"concurrency": True}, ValueError, "concurrency must be an integer >= 1"),
        ({"setup": "not callable"}, TypeError, "setup must be callable"),
        ({"progress": "yes"}, TypeError, "progress must be None, True or False"),
        ({"executor": object()}, TypeError, "executor must be a concurrent.futures.Executor"),
        ({"return_exceptions": None}, TypeError, "return_exceptions must be True or False"),
        ({"sandbox_id": "sb-1"}, ValueError, "sandbox_id cannot be used"),
        ({"setup": print, "fork_from": "sb-1"}, ValueError, "setup .* or fork_from, not both"),
        ({"setup": print, "shape": ""}, ValueError, "shape must be a non-empty str"),
        ({"setup": print, "auto_pause_after": 60}, ValueError, "auto_pause_after cannot be"),
        ({"egress": "pypi.org"}, ValueError, "egress must be a sequence of rule strings"),
        ({"ttl": 1}, ValueError, "ttl must be at least 5 seconds"),
        ({"items": 42}, TypeError, "items must be iterable"),
        ({"fn": "fn"}, TypeError, "fn must be callable as fn"),
    ],
)
def test_invalid_arguments_raise_before_any_request(
    emulator: Emulator, client: Client, arguments: dict[str, Any], error: type, message: str
) -> None:
    emulator.clear_request_log()
    call: dict[str, Any] = {"fn": lambda box, n: n, "items": [1], "client": client, **arguments}
    with pytest.raises(error, match=message):
        cs.map(call.pop("fn"), call.pop("items"), **call)
    assert operations(emulator) == []


def test_setup_runs_once_and_every_item_forks_its_sandbox(
    emulator: Emulator, client: Client
) -> None:
    emulator.clear_request_log()
    setups: list[str] = []

    def setup(box: Lease) -> None:
        setups.append(box.id or "")
        box.write_file("/workspace/prepared.txt", b"ready")

    def fn(box: Lease, n: int) -> str:
        return box.read_file("/workspace/prepared.txt").decode() + str(n)

    assert cs.map(fn, range(4), setup=setup, client=client) == [f"ready{n}" for n in range(4)]
    ops = collections.Counter(op for op, _ in operations(emulator))
    assert len(setups) == 1
    assert ops["sandbox.create"] == 1 and ops["sandbox.pause"] == 1
    assert ops["sandbox.fork"] == 4
    assert ops["sandbox.delete"] == 5  # the four forks, then the setup sandbox
    assert setups[0] not in emulator.live_sandboxes()


# --- Ctrl-C, in a real child process ---------------------------------------------------------

MAP_SCRIPT = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
import createos_sync as cs

def fn(box, n):
    print("running", n, flush=True)
    box.run("sleep 1000")

reuse = sys.argv[1] == "reuse"
cs.map(fn, range(20), concurrency=3, reuse=reuse, client=cs.Client(requests_per_minute=100_000))
"""


def _interrupt_while_three_run(emu: Emulator, how: str = "fresh") -> Any:
    child = spawn([sys.executable, "-c", MAP_SCRIPT, how], emulator_env(emu))
    seen = b""
    while seen.count(b"running") < 3:  # several lines may arrive in one read
        seen += read_until(child, b"\n")
    wait_until(lambda: len(user_processes(emu)) == 3, "three commands to run")
    sandboxes = set(emu.live_sandboxes())
    assert len(sandboxes) == 3
    child.send_signal(signal.SIGINT)
    return child, sandboxes


@pytest.mark.parametrize("how", ["fresh", "reuse"])
def test_ctrl_c_closes_every_lease_then_raises(emulator: Emulator, how: str) -> None:
    emulator.clear_request_log()
    child, sandboxes = _interrupt_while_three_run(emulator, how)
    status, _, err = finish(child)
    assert status != 0 and "KeyboardInterrupt" in err, err
    assert not sandboxes & set(emulator.live_sandboxes())
    assert emulator.live_processes() == []
    for sandbox_id in sandboxes:  # the containment rule: terminated, then destroyed
        # A worker thread may still be releasing its start gate when the Ctrl-C's
        # termination lands: that release then finds stdin closed (409), harmlessly.
        late_gate = ("process.stdin_close", 409)
        done = [op for op in operations(emulator, sandbox_id) if op != late_gate]
        assert done[-2:] == [("process.delete", 200), ("sandbox.delete", 200)]
    assert len(_creations(emulator)) == 3  # nothing new started


def test_a_second_ctrl_c_destroys_what_is_still_open_at_once() -> None:
    # Its own emulator: the stalled answers below outlive the test.
    with own_emulator() as emu:
        # The terminations the first Ctrl-C sends are carried out, their answers stall.
        emu.faults.add(Fault("process.delete", times=3, delay=60))
        child, sandboxes = _interrupt_while_three_run(emu)
        wait_until(lambda: not emu.faults.pending(), "the three terminations")
        child.send_signal(signal.SIGINT)
        status, _, err = finish(child)  # well before the stalled answers
        assert status != 0 and "KeyboardInterrupt" in err, err
        assert "destroying the sandboxes still open" in err
        assert not sandboxes & set(emu.live_sandboxes())
        for sandbox_id in sandboxes:
            assert processes_of(emu, sandbox_id) == []
            assert operations(emu, sandbox_id)[-1] == ("sandbox.delete", 200)
