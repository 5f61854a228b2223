"""The request pacer, on an injected clock."""

from __future__ import annotations

import logging
import threading

import pytest

from createos_sync import OperationTimeout
from createos_sync._wire.deadline import Deadline
from createos_sync._wire.pacer import Pacer, shared_pacer


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_never_more_than_the_limit_in_any_window() -> None:
    t = FakeTime()
    pacer = Pacer(5, window=60, clock=t.clock, sleep=t.sleep)
    sent = []
    for _ in range(12):
        pacer.acquire()
        sent.append(t.now)
        t.now += 1
    for i, moment in enumerate(sent):
        assert sum(moment <= s < moment + 60 for s in sent[i:]) <= 5
    assert t.slept  # it had to wait
    assert sent[5] - sent[0] >= 60


def test_a_wait_past_the_deadline_raises_instead() -> None:
    t = FakeTime()
    pacer = Pacer(1, window=60, clock=t.clock, sleep=t.sleep)
    pacer.acquire()
    with pytest.raises(OperationTimeout, match="the request rate limit leaves no slot in time"):
        pacer.acquire(Deadline.after(5, clock=t.clock))
    assert t.slept == []


def test_threads_share_the_budget() -> None:
    pacer = Pacer(50, window=60)
    counted = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(10):
            pacer.acquire(Deadline.after(0.5))
            with lock:
                counted.append(1)

    threads = [threading.Thread(target=worker) for _ in range(5)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(counted) == 50
    with pytest.raises(OperationTimeout, match="the request rate limit leaves no slot in time"):
        pacer.acquire(Deadline.after(0.5))


def test_clients_of_one_base_url_share_one_pacer() -> None:
    assert shared_pacer("https://a.test", 300) is shared_pacer("https://a.test", 300)
    assert shared_pacer("https://a.test", 300) is not shared_pacer("https://b.test", 300)


def test_a_long_wait_for_the_budget_is_logged_once_and_a_short_one_not_at_all(
    caplog: pytest.LogCaptureFixture,
) -> None:
    t = FakeTime()
    pacer = Pacer(2, window=60, clock=t.clock, sleep=t.sleep, service="https://api.test")
    seen: list[float] = []
    with caplog.at_level(logging.INFO, logger="createos_sync.budget"):
        pacer.acquire()
        t.now += 59
        pacer.acquire()
        pacer.acquire()  # waits 1 s for the first slot: pacing, said nowhere
        assert caplog.records == []
        pacer._sleep = lambda seconds: (seen.append(pacer.waiting()), t.sleep(seconds))
        pacer.acquire()  # waits 59 s for the second one
        assert pacer.waiting() == 0.0  # over
    [record] = caplog.records
    assert record.name == "createos_sync.budget" and record.levelno == logging.INFO
    assert record.getMessage() == (
        "waiting 59 s for the request budget: 2 per minute on https://api.test"
    )
    assert seen == [59.0]  # what a progress bar shows meanwhile


def test_threads_waiting_together_log_one_line() -> None:
    t = FakeTime()
    pacer = Pacer(1, window=60, clock=t.clock, sleep=lambda seconds: None)
    pacer.acquire()
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("createos_sync.budget")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        for _ in range(3):  # three waits begun within the first one: a line for the first
            pacer._wait(30.0, None, "request")
            t.now += 5
        t.now += 30  # that wait is over: a new one is a new line
        pacer._wait(30.0, None, "request")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    assert lines == [
        "waiting 30 s for the request budget: 1 per minute on the service",
        "waiting 30 s for the request budget: 1 per minute on the service",
    ]
