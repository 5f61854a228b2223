"""The machine's request budget: one record in the state directory shared by every process."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import responses

from createos_sync import Client, OperationTimeout
from createos_sync._wire import budget as _budget
from createos_sync._wire.budget import SLOTS, BudgetRecord, RecordBusy, _LockedFile, record_path
from createos_sync._wire.deadline import Deadline
from createos_sync._wire.http import Transport
from createos_sync._wire.pacer import MachinePacer, Pacer, shared_pacer
from createos_sync.budget import forget
from createos_sync.config import Config

from .test_pacer import FakeTime

URL = "https://api.test"
FORK = multiprocessing.get_context("fork")


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return record_path(tmp_path / "state", URL, 60.0)


def _max_in_any_window(moments: list[float], window: float) -> int:
    moments = sorted(moments)
    return max(
        sum(1 for later in moments[i:] if later < start + window) for i, start in enumerate(moments)
    )


def test_never_more_than_the_limit_in_any_window(path: Path) -> None:
    t = FakeTime()
    pacer = MachinePacer(5, BudgetRecord(path, 60.0), clock=t.clock, sleep=t.sleep)
    sent = []
    for _ in range(17):
        pacer.acquire()
        sent.append(t.now)
        t.now += 1
    assert _max_in_any_window(sent, 60.0) == 5
    # the buckets over-count by at most one bucket: the sixth send waits < 61 s + a bucket
    assert 60.0 <= sent[5] - sent[0] <= 60.0 + 60.0 / SLOTS + 1


def test_a_wait_past_the_deadline_raises_instead(path: Path) -> None:
    t = FakeTime()
    pacer = MachinePacer(1, BudgetRecord(path, 60.0), clock=t.clock, sleep=t.sleep)
    pacer.acquire()
    with pytest.raises(OperationTimeout, match="the request rate limit leaves no slot in time"):
        pacer.acquire(Deadline.after(5, clock=t.clock))
    assert t.slept == []


def test_two_pacers_on_one_record_share_its_budget(path: Path) -> None:
    t = FakeTime()
    first = MachinePacer(3, BudgetRecord(path, 60.0), clock=t.clock, sleep=t.sleep)
    second = MachinePacer(3, BudgetRecord(path, 60.0), clock=t.clock, sleep=t.sleep)
    for pacer in (first, second, first):
        pacer.acquire()
    assert t.slept == []
    second.acquire()  # the fourth send in the window must wait, whoever sends it
    assert t.slept and t.slept[0] >= 59


def _send(
    directory: str, limit: int, window: float, count: int, out: multiprocessing.Queue[list[float]]
) -> None:
    """Take ``count`` sends; each is timed by the clock reading the pacer admitted it at.

    That reading is taken under the record's lock, so it orders the sends as the
    record did. A reading after ``acquire`` returns would not: a process set aside
    by the scheduler for a few ms between the two (common on a loaded machine) moves
    its send later than its admission, into a window it was not counted in. (On
    the wire, such delays are what the pacer's 61 s window against the service's
    60 s absorbs; this test's window has no such margin.)
    """
    readings: list[float] = []

    def clock() -> float:
        readings.append(time.monotonic())
        return readings[-1]

    record = BudgetRecord(record_path(Path(directory), URL, window), window)
    pacer = MachinePacer(limit, record, clock=clock)
    sent = []
    for _ in range(count):
        pacer.acquire()
        sent.append(readings[-1])
    out.put(sent)


def test_processes_sharing_the_budget_never_exceed_it(tmp_path: Path) -> None:
    limit, window, workers, each = 8, 1.0, 4, 6
    out = FORK.Queue()
    procs = [
        FORK.Process(target=_send, args=(str(tmp_path), limit, window, each, out))
        for _ in range(workers)
    ]
    for proc in procs:
        proc.start()
    sent = [moment for _ in procs for moment in out.get(timeout=60)]
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    assert len(sent) == workers * each
    assert _max_in_any_window(sent, window) <= limit
    # and the budget was used, not merely respected: 24 sends at 8 a second take 2-3 windows
    assert max(sent) - min(sent) < 5 * window


def _exit_1_if_locked(path: str) -> None:
    try:
        with _LockedFile(Path(path), patience=0.0):
            pass
    except RecordBusy:
        sys.exit(1)


def test_the_clock_is_read_under_the_record_lock(path: Path) -> None:
    """A send's time is read while no other process can count one (else both may count stale)."""
    record = BudgetRecord(path, 60.0)
    assert record.take(10, time.monotonic) == 0.0  # the file exists
    probes: list[int | None] = []

    def clock() -> float:
        probe = FORK.Process(target=_exit_1_if_locked, args=(str(path),))
        probe.start()
        probe.join(30)
        probes.append(probe.exitcode)
        return time.monotonic()

    assert record.take(10, clock) == 0.0
    assert probes == [1]


def _hold(path: str, held: threading.Event) -> None:
    with _LockedFile(Path(path), patience=5.0):
        held.set()
        time.sleep(600)


def test_a_lock_held_by_a_killed_process_is_taken_over(path: Path) -> None:
    record = BudgetRecord(path, 60.0, patience=0.3)
    assert record.take(10, time.monotonic) == 0.0  # the file exists
    held = FORK.Event()
    holder = FORK.Process(target=_hold, args=(str(path), held))
    holder.start()
    try:
        assert held.wait(30)
        with pytest.raises(RecordBusy):
            record.take(10, time.monotonic)
        os.kill(holder.pid, signal.SIGKILL)  # type: ignore[arg-type]
        holder.join(30)
        patient = BudgetRecord(path, 60.0, patience=60.0)
        started = time.monotonic()
        assert patient.take(10, time.monotonic) == 0.0
        assert time.monotonic() - started < 30  # taken over at once, not after its patience
    finally:
        if holder.is_alive():
            holder.kill()
            holder.join()


def test_a_stuck_holder_never_blocks_requests(path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A live holder that never lets go (here: stopped) costs one patience, then we pace alone."""
    held = FORK.Event()
    holder = FORK.Process(target=_hold, args=(str(path), held))
    holder.start()
    try:
        assert held.wait(30)
        os.kill(holder.pid, signal.SIGSTOP)  # type: ignore[arg-type]
        pacer = MachinePacer(100, BudgetRecord(path, 60.0, patience=0.3))
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="createos_sync.pacer"):
            for _ in range(5):
                pacer.acquire(Deadline.after(10))
        assert time.monotonic() - started < 3
        assert caplog.text.count("stayed locked") == 1
    finally:
        holder.kill()
        holder.join()


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: b"garbage",
        lambda raw: raw[:-7],
        lambda raw: raw[:40] + bytes([raw[40] ^ 0xFF]) + raw[41:],
        lambda raw: raw + b"\0",
    ],
    ids=["garbage", "truncated", "flipped-bit", "too-long"],
)
def test_a_corrupt_record_is_started_afresh(
    path: Path, caplog: pytest.LogCaptureFixture, damage: object
) -> None:
    t = FakeTime()
    record = BudgetRecord(path, 60.0)
    for _ in range(3):
        assert record.take(3, t.clock) == 0.0
    assert record.take(3, t.clock) > 0  # full
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    with caplog.at_level(logging.WARNING, logger="createos_sync.pacer"):
        assert record.take(3, t.clock) == 0.0  # afresh: the window is empty again
    assert "corrupt" in caplog.text
    assert record.take(3, t.clock) == 0.0
    assert record.take(3, t.clock) == 0.0
    assert record.take(3, t.clock) > 0  # and it counts properly again


def test_a_record_from_before_a_reboot_is_not_counted(path: Path) -> None:
    """Monotonic time restarts at boot: buckets from the future are ignored."""
    record = BudgetRecord(path, 60.0)
    for _ in range(3):
        record.take(3, lambda: 100_000.0)
    assert record.take(3, lambda: 50.0) == 0.0


def test_an_unwritable_state_directory_falls_back_to_the_process_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("CREATEOS_SYNC_STATE_DIR", str(tmp_path / "file" / "state"))
    with responses.RequestsMock() as mock, caplog.at_level(logging.WARNING):
        mock.get(URL + "/v1/shapes", json={"status": "success", "data": []})
        with Client("key", URL, requests_per_minute=2) as client:
            for _ in range(2):
                assert client.shapes() == []
            pacer = client._transport._pacer
            assert isinstance(pacer, MachinePacer)
            # pacing goes on in this process: the third request in the window must wait
            with pytest.raises(
                OperationTimeout, match="the request rate limit leaves no slot in time"
            ):
                pacer.acquire(Deadline.after(0.2))
    assert caplog.text.count("cannot be kept") == 1


def test_a_child_forked_while_a_thread_takes_the_budget_can_take_it(path: Path) -> None:
    record = BudgetRecord(path, 60.0)
    inside = threading.Event()
    release = threading.Event()

    def slow_clock() -> float:  # runs with the thread lock and the record lock held
        inside.set()
        release.wait(30)
        return time.monotonic()

    taker = threading.Thread(target=record.take, args=(100, slow_clock))
    taker.start()
    try:
        assert inside.wait(30)
        other = BudgetRecord(path, 60.0, patience=5.0)
        child = FORK.Process(target=other.take, args=(100, time.monotonic))
        child.start()
        release.set()  # the child waits for the parent's record lock, never for its thread lock
        child.join(30)
        assert child.exitcode == 0
    finally:
        release.set()
        taker.join(30)


def test_scopes_and_state_directories_have_pacers_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine = shared_pacer(URL, 300)
    assert isinstance(machine, MachinePacer)
    assert shared_pacer(URL, 300, "machine") is machine
    process = shared_pacer(URL, 300, "process")
    assert type(process) is Pacer
    monkeypatch.setenv("CREATEOS_SYNC_STATE_DIR", str(tmp_path / "other"))
    moved = shared_pacer(URL, 300)
    assert isinstance(moved, MachinePacer) and moved is not machine
    assert moved.record.path.is_relative_to(tmp_path / "other")
    assert Client("key", URL, rate_scope="process")._transport._pacer is process
    # A transport made from a configuration alone takes that configuration's scope too.
    assert Transport(Config.resolve("key", URL, rate_scope="process"))._pacer is process


class _Attempts:
    """Counts the record-lock attempts that may wait (their patience > 0)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.patiences: list[float] = []
        attempts = self

        class Counted(_budget._LockedFile):
            def __init__(self, path: Path, patience: float) -> None:
                attempts.patiences.append(patience)
                super().__init__(path, patience)

        monkeypatch.setattr(_budget, "_LockedFile", Counted)

    @property
    def waiting(self) -> int:
        return sum(patience > 0 for patience in self.patiences)


def _stopped_holder(path: Path) -> multiprocessing.process.BaseProcess:
    held = FORK.Event()
    holder = FORK.Process(target=_hold, args=(str(path), held))
    holder.start()
    assert held.wait(30)
    os.kill(holder.pid, signal.SIGSTOP)  # type: ignore[arg-type]
    return holder


def test_a_stuck_holder_is_waited_for_once_per_process_not_once_per_thread(
    path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Threads queued behind the one waiting for the lock learn the verdict: none waits again."""
    attempts = _Attempts(monkeypatch)
    holder = _stopped_holder(path)
    try:
        pacer = MachinePacer(100, BudgetRecord(path, 60.0, patience=0.5))
        errors: list[BaseException] = []

        def send() -> None:
            try:
                for _ in range(3):
                    pacer.acquire(Deadline.after(30))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        with caplog.at_level(logging.WARNING, logger="createos_sync.pacer"):
            threads = [threading.Thread(target=send) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
        assert errors == []
        assert attempts.waiting == 1  # one thread waited the patience; the others did not
        assert caplog.text.count("stayed locked") == 1
    finally:
        holder.kill()
        holder.join()


def test_a_stuck_holder_never_delays_a_send_past_its_deadline(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A deadline shorter than the patience: the send goes, paced alone, before it ends."""
    holder = _stopped_holder(path)
    try:
        pacer = MachinePacer(100, BudgetRecord(path, 60.0, patience=30.0))
        with caplog.at_level(logging.WARNING, logger="createos_sync.pacer"):
            for _ in range(2):
                deadline = Deadline.after(0.3)
                pacer.acquire(deadline)
                assert not deadline.expired()
        assert "stayed locked" not in caplog.text  # not found out yet: 0.6 s of 30
    finally:
        holder.kill()
        holder.join()


def test_sends_use_the_record_again_once_the_stuck_holder_is_gone(path: Path) -> None:
    holder = _stopped_holder(path)
    record = BudgetRecord(path, 60.0, patience=0.2)
    try:
        with pytest.raises(RecordBusy) as found:
            record.take(10, time.monotonic)
        assert found.value.detected
        with pytest.raises(RecordBusy) as again:
            record.take(10, time.monotonic)
        assert not again.value.detected  # warned once
    finally:
        holder.kill()
        holder.join()
    assert record.take(10, time.monotonic) == 0.0


def test_records_idle_for_a_day_are_pruned(tmp_path: Path) -> None:
    rate = tmp_path / _budget.DIRECTORY
    rate.mkdir()
    old, fresh, other = rate / "a.budget", rate / "b.budget", rate / "notes.txt"
    for file in (old, fresh, other):
        file.write_bytes(b"x")
    day_ago = time.time() - 86400 - 60
    os.utime(old, (day_ago, day_ago))
    os.utime(other, (day_ago, day_ago))
    assert _budget.prune(tmp_path) == 1
    assert sorted(p.name for p in rate.iterdir()) == ["b.budget", "notes.txt"]
    assert _budget.prune(tmp_path / "missing") == 0


def test_a_new_state_directory_is_pruned_once_and_forget_removes_a_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CREATEOS_SYNC_STATE_DIR", str(tmp_path))
    stale = record_path(tmp_path, "http://127.0.0.1:1", 61.0)
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"x")
    day_ago = time.time() - 86400 - 60
    os.utime(stale, (day_ago, day_ago))
    pacer = shared_pacer("http://127.0.0.1:2", 300)
    assert not stale.exists()
    assert isinstance(pacer, MachinePacer)
    pacer.acquire()
    assert pacer.record.path.exists()
    forget("http://127.0.0.1:2")
    assert not pacer.record.path.exists()
    assert shared_pacer("http://127.0.0.1:2", 300) is not pacer
