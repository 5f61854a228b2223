"""The output journal on its own: numbering, eviction, replay, backpressure."""

from __future__ import annotations

import threading

import pytest

from createos_sync.emulator._machine.journal import (
    ABORTED,
    End,
    Expired,
    Frame,
    Journal,
    OffsetExpired,
)


def test_seq_rises_by_one_across_streams_and_replays_after_n() -> None:
    journal = Journal(1000)
    for i in range(6):
        journal.append("stdout" if i % 2 else "stderr", b"%d" % i)
    journal.finish(0, None)
    reader = journal.attach(3)
    items = [reader.next(0.1) for _ in range(4)]
    assert [(f.seq, f.stream, f.data) for f in items[:3] if isinstance(f, Frame)] == [
        (4, "stdout", b"3"),
        (5, "stderr", b"4"),
        (6, "stdout", b"5"),
    ]
    assert items[3] == End(6, 0, None)


def test_without_readers_the_oldest_frames_are_evicted() -> None:
    journal = Journal(10)
    for _ in range(5):
        journal.append("stdout", b"abcd")
    stats = journal.stats()
    assert (stats.oldest_seq, stats.newest_seq, stats.bytes) == (4, 5, 8)
    with pytest.raises(OffsetExpired) as caught:
        journal.attach(0)
    assert caught.value.oldest_seq == 4  # the 410's oldest_available_seq
    reader = journal.attach(3)
    first = reader.next(0.1)
    assert isinstance(first, Frame)
    assert first.seq == 4


def test_an_attached_reader_holds_the_writer_back_instead_of_losing_frames() -> None:
    journal = Journal(8)
    reader = journal.attach(0)
    journal.append("stdout", b"1234")
    journal.append("stdout", b"5678")
    third_done = threading.Event()
    writer = threading.Thread(target=lambda: (journal.append("stdout", b"9abc"), third_done.set()))
    writer.start()
    assert not third_done.wait(0.2)  # blocked: frame 1 is unsent
    first = reader.next(1)
    assert isinstance(first, Frame)
    assert first.seq == 1
    assert not third_done.wait(0.2)  # taken, not yet delivered: still blocked
    second = reader.next(1)  # asking for the next one delivers the first
    assert isinstance(second, Frame) and second.seq == 2
    assert third_done.wait(5)
    writer.join()
    assert [f.seq for f in (reader.next(1),) if isinstance(f, Frame)] == [3]


def test_detaching_releases_backpressure() -> None:
    journal = Journal(4)
    reader = journal.attach(0)
    journal.append("stdout", b"1234")
    done = threading.Event()
    threading.Thread(target=lambda: (journal.append("stdout", b"5678"), done.set())).start()
    assert not done.wait(0.2)
    reader.close()
    assert done.wait(5)


def test_closing_evicts_freely_and_a_lagging_reader_learns_it_expired() -> None:
    journal = Journal(4)
    reader = journal.attach(0)
    journal.append("stdout", b"1234")
    journal.close()
    journal.append("stdout", b"5678")
    assert reader.next(0.1) == Expired(2)  # oldest_available_seq on the error frame


def test_idle_reader_times_out_with_none() -> None:
    journal = Journal(4)
    assert journal.attach(0).next(0.05) is None


def test_a_frame_taken_by_a_connection_that_dropped_stays_replayable() -> None:
    """Eviction is by size alone: what a dead connection was handed is not lost with it."""
    journal = Journal(8)
    reader = journal.attach(0)
    journal.append("stdout", b"1234")
    journal.append("stdout", b"5678")
    taken = reader.next(1)  # handed to the connection, which then drops before writing it
    assert isinstance(taken, Frame) and taken.seq == 1
    reader.drop()
    done = threading.Event()
    threading.Thread(target=lambda: (journal.append("stdout", b"9abc"), done.set())).start()
    assert not done.wait(0.3)  # the dropped reader's hold keeps frame 1
    again = journal.attach(0)  # the client reconnects with after=<last seq it saw>
    replayed = [again.next(1), again.next(1)]
    assert replayed == [Frame(1, "stdout", b"1234"), Frame(2, "stdout", b"5678")]
    assert done.wait(5)


def test_a_dropped_readers_hold_expires() -> None:
    journal = Journal(4, dropped_hold=0.2)
    reader = journal.attach(0)
    journal.append("stdout", b"1234")
    reader.drop()
    done = threading.Event()
    threading.Thread(target=lambda: (journal.append("stdout", b"5678"), done.set())).start()
    assert done.wait(5)  # nobody came back: the writer is not held for ever


def test_aborted_journal_ends_every_reader_without_the_exit() -> None:
    journal = Journal(100)
    reader = journal.attach(0)
    journal.append("stdout", b"x")
    journal.abort()
    journal.finish(None, "SIGKILL")
    assert reader.next(0.1) is ABORTED
    assert journal.attach(0).next(0.1) is ABORTED
