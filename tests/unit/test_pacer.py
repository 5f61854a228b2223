"""The request pacer, on an injected clock."""

from __future__ import annotations

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
    with pytest.raises(OperationTimeout):
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
    with pytest.raises(OperationTimeout):
        pacer.acquire(Deadline.after(0.5))


def test_clients_of_one_base_url_share_one_pacer() -> None:
    assert shared_pacer("https://a.test", 300) is shared_pacer("https://a.test", 300)
    assert shared_pacer("https://a.test", 300) is not shared_pacer("https://b.test", 300)
