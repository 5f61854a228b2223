"""The one background scheduler: jobs at their time, cancellation, long jobs on their own thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from createos_sync._sandboxes.background import Scheduler, clock

from ..waiting import wait_until


@pytest.fixture
def scheduler() -> Iterator[Scheduler]:
    s = Scheduler(slice_seconds=0.05)
    yield s
    s.stop()


def test_jobs_run_in_the_order_of_their_time(scheduler: Scheduler) -> None:
    ran: list[str] = []
    scheduler.call_later(0.2, lambda: ran.append("late"), name="late")
    scheduler.call_later(0.05, lambda: ran.append("early"), name="early")
    wait_until(lambda: len(ran) == 2, what="both jobs")
    assert ran == ["early", "late"]


def test_a_cancelled_job_never_runs(scheduler: Scheduler) -> None:
    ran: list[str] = []
    job = scheduler.call_later(0.1, lambda: ran.append("cancelled"), name="cancelled")
    scheduler.call_later(0.2, lambda: ran.append("kept"), name="kept")
    job.cancel()
    assert scheduler.pending() == ["kept"]
    wait_until(lambda: ran, what="the kept job")
    assert ran == ["kept"]


def test_a_failing_job_does_not_stop_the_others(scheduler: Scheduler) -> None:
    ran: list[str] = []

    def fail() -> None:
        raise RuntimeError("boom")

    scheduler.call_later(0, fail, name="failing")
    scheduler.call_later(0.05, lambda: ran.append("after"), name="after")
    wait_until(lambda: ran, what="the job after the failing one")


def test_a_long_job_runs_on_a_thread_of_its_own(scheduler: Scheduler) -> None:
    release = threading.Event()
    ran: list[str] = []
    scheduler.call_later(0, lambda: release.wait(10), name="long", own_thread=True)
    scheduler.call_later(0.05, lambda: ran.append("short"), name="short")
    try:
        wait_until(lambda: ran, what="the short job while the long one blocks")
    finally:
        release.set()


def test_one_thread_serves_every_job(scheduler: Scheduler) -> None:
    threads: set[int] = set()
    for i in range(5):
        scheduler.call_later(0.01 * i, lambda: threads.add(threading.get_ident()), name=f"j{i}")
    wait_until(lambda: len(scheduler.pending()) == 0 and threads, what="all jobs")
    assert len(threads) == 1 and threading.get_ident() not in threads


def test_nothing_runs_after_stop(scheduler: Scheduler) -> None:
    ran: list[str] = []
    scheduler.call_later(0.1, lambda: ran.append("queued"), name="queued")
    scheduler.stop()
    late = scheduler.call_later(0, lambda: ran.append("late"), name="late")
    assert late.cancelled and scheduler.pending() == []
    threading.Event().wait(0.3)
    assert ran == []


def test_the_clock_never_goes_back() -> None:
    readings = [clock() for _ in range(1000)]
    assert readings == sorted(readings)
