"""The local lease journal: location, round trips, damage, concurrent writers, owners."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import threading
import time
from pathlib import Path

import pytest

from createos_sync._journal import Entry, Journal, state_dir

URL = "https://api.example"
GONE_PID = 2**22 + 1  # above Linux's pid_max: never a live process


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    return Journal(tmp_path / "state")


def test_state_dir_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CREATEOS_SYNC_STATE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_dir() == tmp_path / "explicit"
    monkeypatch.delenv("CREATEOS_SYNC_STATE_DIR")
    assert state_dir() == tmp_path / "xdg" / "createos-sync"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert state_dir() == tmp_path / "home" / ".local" / "state" / "createos-sync"
    assert Journal().path == state_dir() / "leases.json"


def test_an_entry_lives_from_before_creation_to_close(journal: Journal) -> None:
    assert journal.entries() == []
    journal.add(Entry(name="a", base_url=URL))
    journal.add(Entry(name="b", base_url=URL))
    a, _ = journal.entries()
    assert (a.name, a.sandbox_id, a.pid) == ("a", None, os.getpid())
    journal.set_sandbox("a", "sbx-1")
    assert [e.sandbox_id for e in journal.entries()] == ["sbx-1", None]
    journal.add(Entry(name="a", base_url=URL, sandbox_id="sbx-2"))  # same name: replaced
    assert [(e.name, e.sandbox_id) for e in journal.entries()] == [("b", None), ("a", "sbx-2")]
    journal.remove("a")
    journal.remove("never-there")
    assert [e.name for e in journal.entries()] == ["b"]
    assert sorted(p.name for p in journal.directory.iterdir()) == [
        "leases.json",
        "leases.json.lock",
    ]


def test_the_file_holds_no_more_than_it_needs(journal: Journal) -> None:
    journal.add(Entry(name="a", base_url=URL, sandbox_id="sbx-1"))
    document = json.loads(journal.path.read_text())
    assert document["version"] == 1
    assert set(document["leases"][0]) == {
        "name", "base_url", "sandbox_id", "fork_from", "pid", "process_start", "host",
        "created_at",
    }  # fmt: skip


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        '"a string"',
        '{"leases": 3}',
        '{"leases": [1, "x", {"no_name": true}]}',
    ],
)
def test_a_damaged_journal_reads_as_empty_and_is_rewritten(
    journal: Journal, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    journal.directory.mkdir(parents=True)
    journal.path.write_text(content)
    assert journal.entries() == []
    journal.add(Entry(name="a", base_url=URL))
    assert [e.name for e in journal.entries()] == ["a"]


def test_unknown_fields_and_bad_items_are_skipped(journal: Journal) -> None:
    journal.directory.mkdir(parents=True)
    good = {"name": "a", "base_url": URL, "pid": 1, "from_the_future": True}
    journal.path.write_text(json.dumps({"version": 2, "leases": [good, {"pid": 2}, []]}))
    (entry,) = journal.entries()
    assert (entry.name, entry.pid) == ("a", 1)


def test_a_failed_rewrite_leaves_the_old_file_and_no_temporary(journal: Journal) -> None:
    journal.add(Entry(name="a", base_url=URL))
    before = journal.path.read_bytes()
    with pytest.raises(TypeError):
        journal.add(Entry(name="b", base_url=object()))  # type: ignore[arg-type]
    assert journal.path.read_bytes() == before
    assert sorted(p.name for p in journal.directory.iterdir()) == [
        "leases.json",
        "leases.json.lock",
    ]


def test_an_unusable_state_directory_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "file").write_text("")
    journal = Journal(tmp_path / "file" / "state")
    with caplog.at_level(logging.WARNING, logger="createos_sync.journal"):
        journal.add(Entry(name="a", base_url=URL))
    assert "could not be updated" in caplog.text


def _add_many(directory: str, prefix: str, count: int) -> None:
    journal = Journal(Path(directory))
    for i in range(count):
        journal.add(Entry(name=f"{prefix}-{i}", base_url=URL))


def test_concurrent_writers_lose_nothing(journal: Journal) -> None:
    directory = str(journal.directory)
    threads = [threading.Thread(target=_add_many, args=(directory, f"t{n}", 20)) for n in range(4)]
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=_add_many, args=(directory, f"p{n}", 20)) for n in range(3)]
    for worker in [*threads, *processes]:
        worker.start()
    for thread in threads:
        thread.join()
    for process in processes:
        process.join()
        assert process.exitcode == 0
    names = {e.name for e in journal.entries()}
    assert names == {
        f"{w}{n}-{i}" for w, k in (("t", 4), ("p", 3)) for n in range(k) for i in range(20)
    }


def _add_then_wait(directory: str, release: threading.Event) -> None:
    Journal(Path(directory)).add(Entry(name="child", base_url=URL))
    release.wait(60)


def test_a_child_forked_while_the_lock_is_held_neither_keeps_nor_inherits_it(
    journal: Journal,
) -> None:
    context = multiprocessing.get_context("fork")
    release = context.Event()
    with journal._locked():
        child = context.Process(target=_add_then_wait, args=(str(journal.directory), release))
        child.start()
    try:
        added = threading.Event()

        def add() -> None:
            journal.add(Entry(name="parent", base_url=URL))
            added.set()

        threading.Thread(target=add, daemon=True).start()
        # a flock would stay held by the child's copy of the descriptor until it exits
        assert added.wait(30), "the forked child kept the journal locked"
        deadline = time.monotonic() + 30
        while {e.name for e in journal.entries()} != {"parent", "child"}:
            assert time.monotonic() < deadline, "the child could not write the journal"
            time.sleep(0.01)
    finally:
        release.set()
        child.join(60)
    assert child.exitcode == 0


def test_owner_alive() -> None:
    assert Entry(name="a", base_url=URL).owner_alive() is True
    assert Entry(name="a", base_url=URL, pid=GONE_PID).owner_alive() is False
    # a live pid that started at another time is a reused pid: the owner is gone
    assert Entry(name="a", base_url=URL, process_start="0").owner_alive() is False
    assert Entry(name="a", base_url=URL, host="elsewhere.example").owner_alive() is None
