"""The local lease journal: location, round trips, damage, concurrent writers, owners."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from createos_sync._sandboxes.journal import enabled
from createos_sync.config import state_dir
from createos_sync.errors import ConfigError
from createos_sync.journal import Entry, Journal

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


def test_unknown_fields_are_ignored_and_missing_optional_ones_defaulted(journal: Journal) -> None:
    journal.directory.mkdir(parents=True)
    good = {"name": "a", "base_url": URL, "pid": 1, "host": "h", "from_the_future": True}
    journal.path.write_text(json.dumps({"version": 2, "leases": [good]}))
    (entry,) = journal.entries()
    assert (entry.name, entry.pid, entry.host, entry.process_start) == ("a", 1, "h", None)


BAD_ENTRIES = {
    "pid as text": ({"pid": "123"}, "pid is not a positive integer"),
    "pid null": ({"pid": None}, "pid is not a positive integer"),
    "pid true": ({"pid": True}, "pid is not a positive integer"),
    "empty sandbox id": ({"sandbox_id": ""}, "sandbox_id is missing or malformed"),
    "numeric sandbox id": ({"sandbox_id": 42}, "sandbox_id is missing or malformed"),
    "sandbox id with a slash": ({"sandbox_id": "../x"}, "sandbox_id is missing or malformed"),
    "no name": ({"name": None}, "name is missing or malformed"),
    "no host": ({"host": 7}, "host is missing or malformed"),
    "start time as number": ({"process_start": 5}, "process_start is not a str"),
}


@pytest.mark.parametrize("change", BAD_ENTRIES.values(), ids=BAD_ENTRIES.keys())
def test_a_badly_typed_entry_is_reported_and_kept_and_its_neighbours_still_read(
    journal: Journal, change: tuple[dict[str, object], str]
) -> None:
    fields, reason = change
    journal.add(Entry(name="before", base_url=URL, sandbox_id="sb-1"))
    journal.add(Entry(name="bad", base_url=URL, sandbox_id="sb-2"))
    journal.add(Entry(name="after", base_url=URL))
    document = json.loads(journal.path.read_text())
    document["leases"][1].update(fields)
    journal.path.write_text(json.dumps(document))

    assert [e.name for e in journal.entries()] == ["before", "after"]
    (bad,) = journal.survey().unreadable
    assert bad.source == journal.path and reason in bad.reason and "entry 2" in bad.reason
    # Every rewrite keeps it as it was, for a human to look at.
    journal.remove("before")
    journal.add(Entry(name="new", base_url=URL))
    assert [e.name for e in journal.entries()] == ["after", "new"]
    assert document["leases"][1] in json.loads(journal.path.read_text())["leases"]


def test_items_that_are_not_entries_are_kept_too(journal: Journal) -> None:
    journal.directory.mkdir(parents=True)
    journal.path.write_text(json.dumps({"version": 1, "leases": [1, "x", [], {"no_name": True}]}))
    assert journal.entries() == []
    assert [u.reason.split(" (")[1] for u in journal.survey().unreadable] == [
        "not an object); it is kept: fix or remove it by hand",
    ] * 3 + ["name is missing or malformed); it is kept: fix or remove it by hand"]
    journal.add(Entry(name="a", base_url=URL))
    assert json.loads(journal.path.read_text())["leases"][1:] == [1, "x", [], {"no_name": True}]


def _entries_text(*entries: Entry) -> str:
    return json.dumps({"version": 1, "leases": [attrs.asdict(e) for e in entries]}, indent=1)


@pytest.mark.parametrize(
    "damage",
    ["truncated", "garbage in the middle", "not a journal", "a bare string"],
)
def test_a_damaged_journal_is_set_aside_and_its_entries_salvaged(
    journal: Journal, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    first = Entry(name="first", base_url=URL, sandbox_id="sb-1", pid=GONE_PID)
    middle = Entry(name="middle", base_url=URL, sandbox_id="sb-2", pid=GONE_PID)
    last = Entry(name="last", base_url=URL, sandbox_id="sb-3", pid=GONE_PID)
    text = _entries_text(first, middle, last)
    content, salvaged, cut = {
        "truncated": (text[: text.index('"pid"', text.index('"last"'))], ["first", "middle"],
                      ("last", "sb-3")),
        "garbage in the middle": (text.replace('"middle"', '"middle" @@', 1), ["first", "last"],
                                  ("middle", "sb-2")),
        "not a journal": (json.dumps({"leases": {"x": attrs.asdict(first)}}), ["first"], None),
        "a bare string": ('"a string"', [], None),
    }[damage]  # fmt: skip
    journal.directory.mkdir(parents=True)
    journal.path.write_text(content)

    with caplog.at_level(logging.WARNING, logger="createos_sync.journal"):
        assert [e.name for e in journal.entries()] == salvaged
    (aside,) = journal.directory.glob("leases.json.unreadable-*")
    assert re.fullmatch(r"leases\.json\.unreadable-\d{8}T\d{6}Z", aside.name)
    assert aside.read_text() == content  # never discarded
    assert "set aside as " + aside.name in caplog.text
    survey = journal.survey()
    assert [e.name for e in survey.entries] == salvaged
    assert survey.unreadable[-1].source == aside
    if cut is not None:  # the entry that was cut: its name (and id) still find its sandbox
        broken = survey.unreadable[0]
        assert (broken.name, broken.sandbox_id) == cut and "cut off" in broken.reason
    # The fresh journal is a normal one again: read without setting anything else aside.
    journal.add(Entry(name="new", base_url=URL))
    assert [e.name for e in journal.entries()] == [*salvaged, "new"]
    assert len(list(journal.directory.glob("leases.json.unreadable-*"))) == 1


def test_an_empty_file_is_an_empty_journal(journal: Journal) -> None:
    journal.directory.mkdir(parents=True)
    journal.path.write_text("  \n")
    assert journal.entries() == [] and journal.survey().unreadable == []


def test_a_failed_rewrite_leaves_the_old_file_and_no_temporary(journal: Journal) -> None:
    journal.add(Entry(name="a", base_url=URL))
    before = journal.path.read_bytes()
    with pytest.raises(TypeError, match="is not JSON serializable"):
        journal.add(Entry(name="b", base_url=object()))  # type: ignore[arg-type]
    assert journal.path.read_bytes() == before
    assert sorted(p.name for p in journal.directory.iterdir()) == [
        "leases.json",
        "leases.json.lock",
    ]


def test_a_write_never_waits_on_the_lock_an_interrupt_can_leave_in_tempfile(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tempfile`` takes a lock at its first use outside the ``try`` that releases it:
    Ctrl-C there leaves it held, and a failed ``open()`` then writes the journal again."""
    monkeypatch.setattr(tempfile, "_name_sequence", None)  # a process yet to use tempfile
    held = tempfile._once_lock  # type: ignore[attr-defined]
    held.acquire()  # as the interrupted first use leaves it

    def add_and_remove() -> None:
        journal.add(Entry(name="a", base_url=URL))
        journal.remove("a")

    writer = threading.Thread(target=add_and_remove, daemon=True)
    try:
        writer.start()
        writer.join(10)
        assert not writer.is_alive(), "the journal write waits on tempfile's lock"
    finally:
        held.release()
        writer.join(10)
    assert journal.entries() == []
    assert sorted(p.name for p in journal.directory.iterdir()) == [
        "leases.json",
        "leases.json.lock",
    ]


def _not_a_directory(tmp_path: Path) -> Journal:
    (tmp_path / "file").write_text("")
    return Journal(tmp_path / "file" / "state")


def _journal_is_a_directory(tmp_path: Path) -> Journal:
    (tmp_path / "state" / "leases.json").mkdir(parents=True)
    return Journal(tmp_path / "state")


@pytest.mark.parametrize("unusable", [_not_a_directory, _journal_is_a_directory])
def test_an_unwritable_journal_refuses_to_record_and_says_how_to_fix_it(
    tmp_path: Path, unusable: Any, caplog: pytest.LogCaptureFixture
) -> None:
    journal = unusable(tmp_path)
    with pytest.raises(ConfigError) as caught:
        journal.add(Entry(name="a", base_url=URL))
    message = str(caught.value)
    assert str(journal.directory) in message
    assert "CREATEOS_SYNC_STATE_DIR" in message and "journal=False" in message
    assert "CREATEOS_SYNC_JOURNAL=off" in message
    # After the creation, a failed update only warns: the name already finds the sandbox.
    with caplog.at_level(logging.WARNING, logger="createos_sync.journal"):
        journal.set_sandbox("a", "sb-1")
        journal.remove("a")
    assert caplog.text.count("could not be updated") == 2


FULL_DISK = """
import resource, signal, sys
from pathlib import Path
from createos_sync.errors import ConfigError
from createos_sync.journal import Entry, Journal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
try:
    Journal(Path(sys.argv[1])).add(Entry(name="a", base_url="https://api.example"))
except ConfigError as exc:
    print(exc)
"""


def test_a_journal_that_cannot_grow_refuses_to_record(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(tmp_path / "state")],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "cannot be written (OSError: File too large)" in done.stdout, done.stderr
    assert not (tmp_path / "state" / "leases.json").exists()


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, True), ("", True), ("on", True), ("1", True), ("off", False), ("OFF ", False),
     ("0", False), ("false", False), ("no", False)],
)  # fmt: skip
def test_the_journal_can_be_turned_off_by_the_environment(
    value: str | None, expected: bool
) -> None:
    environ = {} if value is None else {"CREATEOS_SYNC_JOURNAL": value}
    assert enabled(environ) is expected


def test_a_misspelt_journal_setting_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="CREATEOS_SYNC_JOURNAL must be 'on' or 'off'"):
        enabled({"CREATEOS_SYNC_JOURNAL": "of"})


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


def test_a_live_but_stuck_lock_holder_delays_for_the_patience_only(tmp_path: Path) -> None:
    """A process stopped while it holds the journal's lock (SIGSTOP, a debugger) must not
    block every other lease for ever: creating refuses, forgetting only warns."""
    journal = Journal(tmp_path, patience=0.3)
    journal.add(Entry(name="kept", base_url="https://api.test"))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time\n"
            f"f = open({str(journal.directory / 'leases.json.lock')!r}, 'a')\n"
            "fcntl.lockf(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        os.kill(holder.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(ConfigError, match=r"held by another process for more than 0\.3 s"):
            journal.add(Entry(name="new", base_url="https://api.test"))
        journal.remove("kept")  # a warning, not a hang: the entry stays for reap
        assert time.monotonic() - started < 5
    finally:
        holder.kill()
        holder.wait()
    assert [e.name for e in journal.entries()] == ["kept"]


@pytest.mark.parametrize("umask", [0o000, 0o022])
def test_what_the_state_directory_holds_is_this_user_s_alone_whatever_the_umask(
    tmp_path: Path, umask: int
) -> None:
    """Issue 22 (11): directories 0700, files 0600 (sandbox ids and names are private)."""
    from createos_sync._wire.budget import BudgetRecord, record_path

    state = tmp_path / "state"
    previous = os.umask(umask)
    try:
        journal = Journal(state)
        journal.add(Entry(name="a", base_url=URL, sandbox_id="sbx-1"))
        journal.path.write_text("{damaged")
        journal.entries()  # sets the damaged file aside
        record = BudgetRecord(record_path(state, URL, 60.0), 60.0)
        record.take(5, time.time)
    finally:
        os.umask(previous)
    made = [p for p in [state, *state.rglob("*")] if not p.name.startswith(".leases.")]
    modes = {str(p.relative_to(tmp_path)): oct(p.stat().st_mode & 0o777) for p in made}
    assert any(".lock" in name for name in modes) and any("rate" in name for name in modes)
    assert any(name.startswith("state/leases.json.") for name in modes), modes  # set aside
    assert {m for p, m in modes.items() if (tmp_path / p).is_dir()} == {"0o700"}, modes
    assert {m for p, m in modes.items() if (tmp_path / p).is_file()} == {"0o600"}, modes


def test_the_networks_a_lease_made_are_kept_with_its_entry_and_salvaged(journal: Journal) -> None:
    """Issue 35, item 9: written only when there are some; read back; salvaged from a cut."""
    journal.add(Entry(name="a", base_url=URL, sandbox_id="sbx-1"))
    journal.add_network("a", "net-1")
    journal.add_network("a", "net-2")
    journal.drop_network("a", "net-1")
    (entry,) = journal.entries()
    assert entry.networks == ("net-2",)
    assert json.loads(journal.path.read_text())["leases"][0]["networks"] == ["net-2"]
    text = journal.path.read_text()
    journal.path.write_text(text[: text.rindex("}")])  # cut at the end: unparseable
    (salvaged,) = journal.entries()
    assert salvaged.networks == ("net-2",)
    journal.directory.joinpath("leases.json").write_text(
        json.dumps({"version": 1, "leases": [{**attrs.asdict(entry), "networks": ["../x"]}]})
    )
    survey = journal.survey()
    assert (
        survey.entries == []
        and "a network id is missing or malformed" in survey.unreadable[0].reason
    )
