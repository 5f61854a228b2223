"""The output journal on its own: numbering, eviction, replay, backpressure."""

from __future__ import annotations

import threading

import pytest

from createos_sync.emulator._journal import EXPIRED, End, Frame, Journal, OffsetExpired


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
    with pytest.raises(OffsetExpired):
        journal.attach(0)
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
    assert third_done.wait(5)
    writer.join()
    assert [f.seq for f in (reader.next(1), reader.next(1)) if isinstance(f, Frame)] == [2, 3]


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
    assert reader.next(0.1) is EXPIRED


def test_idle_reader_times_out_with_none() -> None:
    journal = Journal(4)
    assert journal.attach(0).next(0.05) is None
