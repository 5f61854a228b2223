"""The process ledger behind the containment rule."""

from __future__ import annotations

from createos_sync._containment import ProcessTable


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
