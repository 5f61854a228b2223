"""Cancelling a run from another thread or event loop: the tree ended and confirmed, then raised.

What the adapters' ``exec`` relies on (``integrations._threads.run``): one
request per command in the lease's session, and a cancellation that wakes
the blocked read at once, ends every process of the command (``setsid``
included) and only then propagates.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator

import anyio
import pytest

import createos_sync as cs
from createos_sync import Lease
from createos_sync.emulator import Emulator
from createos_sync.integrations import _threads

from .helpers import operations, processes_of


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    """Streams without heartbeats (as a quiet real network): only the cancel's cut of the
    stream, not a heartbeat's arrival, can wake a read blocked on a silent command."""
    with Emulator(rate_limit=None, heartbeat_interval=3600) as emu:
        yield emu


ESCAPING = "echo started; setsid sleep 1000 & (sleep 1000 &); sleep 1000"
BOUND = 10.0  # seconds from the cancel to the raise: about two round trips on loopback


def _cancel_when_started(cancel: cs.Cancel, started: threading.Event, at: list[float]) -> None:
    started.wait(30)
    at.append(time.monotonic())
    cancel.set()


def _cancelled_run(box: Lease) -> tuple[cs.RunCancelled, float]:
    """``ESCAPING`` run with a cancel set from another thread once it printed; the error and
    the seconds from the cancel to the raise."""
    cancel, started, at = cs.Cancel(), threading.Event(), []
    canceller = threading.Thread(target=_cancel_when_started, args=(cancel, started, at))
    canceller.start()
    try:
        with pytest.raises(cs.RunCancelled, match="was cancelled: its processes were ended") as e:
            box.run(ESCAPING, timeout=600, cancel=cancel, on_output=lambda *_: started.set())
        raised = time.monotonic()
    finally:
        started.set()
        canceller.join()
    return e.value, raised - at[0]


def test_a_run_cancelled_from_another_thread_ends_its_tree_then_raises(
    emulator: Emulator, box: Lease
) -> None:
    box.run("true")
    emulator.clear_request_log()

    error, took = _cancelled_run(box)

    assert took < BOUND
    assert (error.result.timed_out, error.result.stdout) == (True, "started\n")
    assert processes_of(emulator, box.id) == []
    kinds = [name for name, _ in operations(emulator)]
    # the command, ending it, and the stream reattached after the cancel cut it
    assert sorted(kinds) == ["process.connect", "process.input", "process.input"]
    emulator.clear_request_log()
    assert box.run("echo after").stdout == "after\n"
    assert operations(emulator) == [("process.input", 200)]


def test_a_cancelled_managed_process_ends_its_tree_then_raises(
    emulator: Emulator, box: Lease, managed_path: None
) -> None:
    error, took = _cancelled_run(box)

    assert took < BOUND
    assert error.result.stdout == "started\n"
    assert processes_of(emulator, box.id) == []


def test_a_cancel_set_before_the_run_sends_nothing(emulator: Emulator, box: Lease) -> None:
    box.run("true")
    cancel = cs.Cancel()
    cancel.set()
    emulator.clear_request_log()

    with pytest.raises(cs.RunCancelled):
        box.run("touch /tmp/never", cancel=cancel)

    assert operations(emulator) == []
    assert box.run("test -e /tmp/never").exit_code == 1


def test_cancel_must_be_a_token(box: Lease) -> None:
    with pytest.raises(TypeError, match=r"cancel must be a createos_sync\.Cancel"):
        box.run("true", cancel=threading.Event())  # type: ignore[call-overload]


def test_an_adapter_exec_is_one_request_and_its_cancellation_ends_the_tree(
    emulator: Emulator, box: Lease
) -> None:
    async def scenario() -> float:
        await _threads.run(box, "true", timeout=60)  # the session's start
        emulator.clear_request_log()
        result = await _threads.run(box, "cat; echo $A", timeout=60, stdin=b"in ", env={"A": "a"})
        assert result.stdout == "in a\n"
        assert operations(emulator) == [("process.input", 200)]  # stdin inline

        cancelled_at = 0.0
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:
                group.start_soon(functools.partial(_threads.run, box, ESCAPING, timeout=600))
                while not any(p for p in processes_of(emulator, box.id)):
                    await anyio.sleep(0.02)
                await anyio.sleep(0.2)  # the command's processes have started
                cancelled_at = time.monotonic()
                scope.cancel()
        assert processes_of(emulator, box.id) == []  # before the cancellation returned
        return time.monotonic() - cancelled_at

    took = anyio.run(scenario)

    assert took < BOUND
    assert box.run("echo after").stdout == "after\n"


def test_an_adapter_exec_times_out_with_its_output(emulator: Emulator, box: Lease) -> None:
    async def scenario() -> None:
        with pytest.raises(TimeoutError, match=r"timed out after 1\.5 seconds") as e:
            await _threads.run(box, "echo so far; sleep 1000", timeout=1.5)
        assert e.value.truncated_output == "so far\n"  # type: ignore[attr-defined]

    anyio.run(scenario)

    assert processes_of(emulator, box.id) == []


def test_an_exec_beside_a_busy_session_takes_a_managed_process_and_cancels_too(
    emulator: Emulator, box: Lease
) -> None:
    box.run("true")

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(functools.partial(_threads.run, box, "sleep 1000", timeout=600))
            while not processes_of(emulator, box.id):  # the session is busy with it
                await anyio.sleep(0.02)
            emulator.clear_request_log()
            group.start_soon(functools.partial(_threads.run, box, ESCAPING, timeout=600))
            while len(processes_of(emulator, box.id)) < 2:
                await anyio.sleep(0.02)
            await anyio.sleep(0.2)
            group.cancel_scope.cancel()
        assert processes_of(emulator, box.id) == []  # both trees, before it returned

    anyio.run(scenario)

    assert ("process.create", 200) in operations(emulator)  # the second: a managed process
    assert box.run("echo after").stdout == "after\n"
