"""The adapters' exec from an event loop: a cancellation waits for the command's end and
carries any failure to confirm it (``integrations._threads.run``)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import anyio
import pytest

import createos_sync as cs
from createos_sync.integrations import _threads


class FakeLease:
    """A lease whose ``run`` blocks until cancelled, then ends its command (slowly)."""

    id = "sb-fake"

    def __init__(self, failure: BaseException | None = None) -> None:
        self.failure = failure
        self.running = threading.Event()
        self.ended_at: float | None = None
        self.calls: list[dict[str, Any]] = []

    def run(self, argv: object, **options: Any) -> cs.RunResult[str]:
        self.calls.append({"argv": argv, **options})
        cancel: cs.Cancel = options["cancel"]
        self.running.set()
        while not cancel.is_set():
            time.sleep(0.01)
        time.sleep(0.3)  # ending the command's tree takes a round trip or two
        self.ended_at = time.monotonic()
        if self.failure is not None:
            raise self.failure
        raise cs.RunCancelled(_result(timed_out=True))


def _result(*, timed_out: bool, stdout: str = "") -> cs.RunResult[str]:
    return cs.RunResult(
        args="x", exit_code=None if timed_out else 0, stdout=stdout, stderr="",
        process_id="p", timed_out=timed_out, duration=0.0,
    )  # fmt: skip


def _cancel_exec(lease: FakeLease) -> tuple[BaseException, float]:
    """Cancel an exec once it runs: what the cancelled task saw, and when it saw it."""
    seen: list[tuple[BaseException, float]] = []

    async def exec_() -> None:
        try:
            await _threads.run(lease, "sleep 1000", timeout=600)  # type: ignore[arg-type]
        except anyio.get_cancelled_exc_class() as exc:
            seen.append((exc, time.monotonic()))
            raise

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(exec_)
            while not lease.running.is_set():
                await anyio.sleep(0.01)
            group.cancel_scope.cancel()

    anyio.run(scenario)
    assert len(seen) == 1
    return seen[0]


def test_a_cancelled_exec_propagates_once_the_command_has_ended() -> None:
    lease = FakeLease()

    cancelled, at = _cancel_exec(lease)

    assert lease.ended_at is not None and lease.ended_at <= at
    assert not cs.is_cleanup_error(cancelled)
    assert getattr(cancelled, "__notes__", []) == []
    assert lease.calls[0]["stdin"] is None  # no stdin: EOF at once, nothing staged


def test_a_cleanup_failure_rides_on_the_cancellation_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failure = cs.CreateosCleanupError(
        "termination of process p could not be confirmed", sandbox_id="sb-fake"
    )
    lease = FakeLease(failure)

    with caplog.at_level(logging.ERROR, logger="createos_sync.integrations"):
        cancelled, _ = _cancel_exec(lease)

    assert cs.is_cleanup_error(cancelled)
    assert "ending the cancelled command in sandbox sb-fake failed" in caplog.text


def test_any_other_failure_while_ending_it_is_noted_on_the_cancellation() -> None:
    lease = FakeLease(cs.LeaseClosed("the lease was closed"))

    cancelled, _ = _cancel_exec(lease)

    notes = getattr(cancelled, "__notes__", [])
    assert any("sb-fake failed: LeaseClosed('the lease was closed')" in n for n in notes)


def test_a_job_abandoned_before_its_thread_started_never_runs() -> None:
    ran: list[bool] = []
    job = _threads._Job(lambda: ran.append(True))

    assert job.abandon() is False
    with pytest.raises(_threads._Abandoned):
        job()
    assert ran == []


def test_a_timed_out_exec_raises_timeout_error_with_the_output_so_far() -> None:
    class TimingOut:
        id = "sb-fake"

        def run(self, argv: object, **options: Any) -> cs.RunResult[str]:
            return _result(timed_out=True, stdout="so far\n")

    async def scenario() -> None:
        await _threads.run(TimingOut(), "sleep 9", timeout=1.5)  # type: ignore[arg-type]

    with pytest.raises(TimeoutError, match=r"timed out after 1\.5 seconds") as e:
        anyio.run(scenario)
    assert e.value.truncated_output == "so far\n"  # type: ignore[attr-defined]
