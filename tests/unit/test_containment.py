"""The process ledger behind the containment rule."""

from __future__ import annotations

import threading

import pytest

from createos_sync._sandboxes.containment import CleanupTime, ProcessTable
from createos_sync._wire.deadline import Deadline
from createos_sync.errors import LeaseClosed


def test_an_unconfirmed_tree_stays_unconfirmed_when_its_leader_is_seen_to_exit() -> None:
    table = ProcessTable()
    table.started("p")
    table.settle("p", confirmed=False)
    table.finished("p")  # the exit frame reports the leader, not the tree
    assert table.poisoned and table.unconfirmed_ids == ["p"]
    assert "termination of process p could not be confirmed" in table.why_poisoned()


def test_a_later_confirmed_termination_clears_the_suspicion() -> None:
    table = ProcessTable()
    table.started("p")
    table.settle("p", confirmed=False)
    table.settle("p", confirmed=True)
    assert not table.poisoned and table.unfinished() == []


def test_ambiguous_creation_poisons() -> None:
    table = ProcessTable()
    table.ambiguous_creation()
    assert table.poisoned and table.why_poisoned() == "1 process creation(s) had an unknown outcome"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_every_step_of_cleanup_gets_a_share_of_its_own() -> None:
    clock = FakeClock()
    budget = CleanupTime.start(60.0, clock)
    assert budget.creations().remaining() == pytest.approx(10.0)
    clock.now += 10  # the wait used its whole share
    assert budget.terminate().remaining() == pytest.approx(10.0)  # still a full share
    clock.now += 10
    assert budget.retry().remaining() == pytest.approx(10.0)
    clock.now += 10
    assert budget.read().remaining() == pytest.approx(10.0)
    clock.now += 10
    # the last step gets what is left of the whole if more than its share
    assert budget.destroy().remaining() == pytest.approx(20.0)
    early = CleanupTime.start(60.0, clock)
    assert early.destroy().remaining() == pytest.approx(60.0)


def test_a_termination_share_always_covers_the_grace_the_service_waits() -> None:
    budget = CleanupTime.start(3.0, FakeClock())
    assert budget.terminate().remaining() == pytest.approx(1.0 + 2.0)  # default grace 1 s
    assert budget.retry(grace=0.0).remaining() == pytest.approx(2.0)
    assert CleanupTime.start(600.0, FakeClock()).terminate(grace=5).remaining() == 100.0


def test_a_closing_table_refuses_creations_and_waits_for_those_in_flight() -> None:
    table = ProcessTable()
    entered, release = threading.Event(), threading.Event()

    def create() -> None:
        with table.creating():
            entered.set()
            release.wait(10)
            table.started("p")

    creator = threading.Thread(target=create)
    creator.start()
    assert entered.wait(10)
    threading.Timer(0.1, release.set).start()
    table.shut(Deadline.after(10))  # returns once the creation in flight has recorded its id
    assert table.unfinished() == ["p"] and not table.poisoned
    with pytest.raises(LeaseClosed, match="closing"), table.creating():
        pass
    creator.join(10)


def test_a_creation_still_unanswered_when_the_wait_ends_is_ambiguous() -> None:
    table = ProcessTable()
    with table.creating():
        table.shut(Deadline.after(0.05))
    assert table.poisoned and table.ambiguous == 1
