"""Issue 42: attach claims and reap marks, one locked transaction each, across processes."""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

import pytest

from createos_sync._sandboxes import claims
from createos_sync.journal import Entry, Journal

URL = "https://api.example"
DEAD = {"pid": 2**22 + 1, "process_start": "0"}  # above pid_max: never a live process


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    return Journal(tmp_path / "state")


def test_an_attach_takes_dead_owners_entries_and_shares_live_ones(journal: Journal) -> None:
    journal.add(Entry(name="crashed", base_url=URL, sandbox_id="sb-1", **DEAD))
    journal.add(Entry(name="alive", base_url=URL + "/v1", sandbox_id="sb-1"))  # same service
    journal.add(Entry(name="other", base_url=URL, sandbox_id="sb-2", **DEAD))
    attached = claims.claim(journal, "sb-1", URL)
    assert attached.taken == ("crashed",) and attached.holders == (os.getpid(),)
    owners = {e.name: e.pid for e in journal.entries()}
    assert owners == {"crashed": os.getpid(), "alive": os.getpid(), "other": DEAD["pid"]}
    assert claims.attached(journal, URL) == {"sb-1": (os.getpid(),)}
    # kept: the claim goes, the taken entry stays this process's
    claims.release(journal, attached, gone=False)
    assert claims.attached(journal, URL) == {}
    assert {e.name for e in journal.entries()} == {"crashed", "alive", "other"}
    # destroyed: the entries naming it go with it (this process's and dead owners')
    claims.release(journal, claims.claim(journal, "sb-1", URL), gone=True)
    assert {e.name for e in journal.entries()} == {"other"}


def test_a_reap_re_checks_under_the_lock_and_marks_before_it_destroys(journal: Journal) -> None:
    journal.add(Entry(name="crashed", base_url=URL, sandbox_id="sb-1", **DEAD))
    (read,) = journal.entries()  # what a reap read before the attach came
    attached = claims.claim(journal, "sb-1", URL)
    with pytest.raises(claims.Held, match=r"a lease of process \d+ took it meanwhile"):
        claims.begin_reap(journal, read, ("sb-1",), held_ok=False)
    claims.release(journal, attached, gone=False)
    # the entry is this process's now; restored to a dead owner, a live claim still holds it
    journal.add(read)
    attached = claims.claim(journal, "sb-1", URL)
    journal.add(read)  # as if the owner changed back: only the claim is left to protect it
    with pytest.raises(claims.Held, match=r"a live lease of process \d+ is attached to it"):
        claims.begin_reap(journal, read, ("sb-1",), held_ok=False)
    token = claims.begin_reap(journal, read, ("sb-1",), held_ok=True)  # reap --all, confirmed
    with pytest.raises(claims.Held, match=r"being destroyed by a reap \(process \d+\)"):
        claims.claim(journal, "sb-1", URL)  # an attach during the destroy is refused
    with pytest.raises(claims.Held, match="another reap"):
        claims.begin_reap(journal, read, ("sb-1",), held_ok=True)
    claims.end_reap(journal, read, token, destroyed=True)
    assert journal.entries() == []
    claims.release(journal, attached, gone=True)
    assert "claims" not in journal.path.read_text()  # nothing left behind


def test_ordinary_journal_updates_keep_the_claims(journal: Journal) -> None:
    attached = claims.claim(journal, "sb-1", URL)
    journal.add(Entry(name="a", base_url=URL))
    journal.set_sandbox("a", "sb-9")
    journal.remove("a")
    assert claims.attached(journal, URL) == {"sb-1": (os.getpid(),)}
    claims.release(journal, attached, gone=False)


def _claim_and_wait(directory: str, purpose: str, ready: multiprocessing.Event) -> None:  # type: ignore[valid-type]
    journal = Journal(Path(directory))
    if purpose == "attach":
        claims.claim(journal, "sb-1", URL)
    else:
        (entry,) = journal.entries()
        claims.begin_reap(journal, entry, ("sb-1",), held_ok=False)
    ready.set()  # type: ignore[attr-defined]
    signal.pause()


def _in_child(journal: Journal, purpose: str) -> multiprocessing.Process:
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    child = context.Process(target=_claim_and_wait, args=(str(journal.directory), purpose, ready))
    child.start()
    assert ready.wait(30)
    return child


def test_another_process_s_claims_hold_while_it_lives_and_nothing_once_it_died(
    journal: Journal,
) -> None:
    journal.add(Entry(name="crashed", base_url=URL, sandbox_id="sb-1", **DEAD))
    attacher = _in_child(journal, "attach")
    (entry,) = journal.entries()  # taken by the child, which lives
    assert entry.pid == attacher.pid
    journal.add(Entry(name="crashed", base_url=URL, sandbox_id="sb-1", **DEAD))
    (entry,) = journal.entries()
    with pytest.raises(claims.Held, match=f"a live lease of process {attacher.pid} is attached"):
        claims.begin_reap(journal, entry, ("sb-1",), held_ok=False)
    os.kill(attacher.pid, signal.SIGKILL)  # SIGKILL: its claim stays in the file, stale
    attacher.join()
    token = claims.begin_reap(journal, entry, ("sb-1",), held_ok=False)
    claims.end_reap(journal, entry, token, destroyed=False)

    reaper = _in_child(journal, "reap")
    with pytest.raises(claims.Held, match=f"being destroyed by a reap \\(process {reaper.pid}\\)"):
        claims.claim(journal, "sb-1", URL)
    os.kill(reaper.pid, signal.SIGKILL)  # killed mid-destroy: its mark holds nothing
    reaper.join()
    attached = claims.claim(journal, "sb-1", URL)
    assert attached.taken == ("crashed",)
    claims.release(journal, attached, gone=True)
    assert journal.entries() == []
    assert "claims" not in journal.path.read_text()  # the stale ones were pruned
