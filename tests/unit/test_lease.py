"""Lease open/close over the wire: creation, polling, containment (API.md close steps 1-7)."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import responses

import createos_sync as cs
from createos_sync import Client

from ..waiting import wait_until
from .wire import API, KEY, PROCESS, SANDBOX, Chunked, Service, exit_frame, ndjson, sandbox


class Held(Chunked):
    """An output stream that stays open (a running process) until ``release`` is set."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__([])
        self.release = release
        self.sent = False

    def readinto(self, buffer: Any) -> int:
        if self.sent:
            return 0
        self.release.wait(10)
        piece = ndjson(exit_frame(None, "SIGTERM"))
        buffer[: len(piece)] = piece
        self.sent = True
        return len(piece)


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def start_background(lease: cs.Lease, service: Service, release: threading.Event) -> Any:
    service.create_process()
    service.connect(raw=io.BufferedReader(Held(release)))
    service.add("POST", f"/sandboxes/{SANDBOX}/processes/{PROCESS}/input", body={"input_seq": 1})
    return lease.start("sleep 1000")


# --- opening ------------------------------------------------------------------


def test_open_and_close_cost_three_requests_when_created_running(
    client: Client, service: Service
) -> None:
    service.open_running()
    service.destroy_sandbox()
    with client.lease() as box:
        assert box.id == SANDBOX and box.status == "running"
    assert len(service.mock.calls) == 3  # creation, the ttl watchdog, destroy
    assert box.closed


def test_without_ttl_open_and_close_cost_two_requests(client: Client, service: Service) -> None:
    service.create_sandbox("running")
    service.destroy_sandbox()
    with client.lease(ttl=None):
        pass
    assert len(service.mock.calls) == 2


def test_open_sends_a_unique_name_and_the_settings(client: Client, service: Service) -> None:
    service.open_running()
    service.open_running()
    first = client.lease("s-2vcpu-4gb", env={"A": "1"}, auto_pause_after=120, name="job").open()
    second = client.lease().open()
    bodies = [json.loads(c.request.body) for c in service.calls("POST", "/sandboxes")]
    assert bodies[0]["shape"] == "s-2vcpu-4gb"
    assert bodies[0]["envs"] == {"A": "1"} and bodies[0]["auto_pause_after_seconds"] == 120
    assert bodies[0]["name"].startswith("job-")
    assert bodies[0]["name"] != bodies[1]["name"]
    for lease in (first, second):
        service.close(lease)


def test_open_polls_until_running_backing_off(
    client: Client, service: Service, sleeps: list[float]
) -> None:
    service.create_sandbox("creating")
    for status in ("creating", "creating", "creating", "running"):
        service.get_sandbox(status)
    service.watchdog()
    service.destroy_sandbox()
    with client.lease():
        pass
    # The creation's answer counts as the first look: the first poll waits too.
    assert len(sleeps) == 4 and sleeps == sorted(sleeps) and sleeps[0] <= 0.1
    assert len(service.calls("GET", f"/sandboxes/{SANDBOX}")) == 4


def test_a_creation_answered_without_a_status_runs_at_once(
    client: Client, service: Service
) -> None:
    """The service answers a creation once the sandbox runs; its answer may omit the
    status (the official TypeScript SDK reads it as running): no poll, no failure."""
    answer = sandbox()
    del answer["status"]
    service.create_sandbox(body=answer)
    service.watchdog()
    service.destroy_sandbox()
    with client.lease() as box:
        assert box.status == "running"
    assert service.calls("GET", f"/sandboxes/{SANDBOX}") == []


def test_sandbox_that_fails_while_starting_is_destroyed(client: Client, service: Service) -> None:
    service.create_sandbox("creating")
    service.get_sandbox("failed")
    service.destroy_sandbox()
    with pytest.raises(cs.SandboxUnavailable, match="failed"):
        client.lease().open()
    assert service.calls("DELETE")[-1].request.url.endswith(f"/sandboxes/{SANDBOX}")


def test_failed_destroy_after_failed_open_is_a_cleanup_error(
    client: Client, service: Service
) -> None:
    service.create_sandbox("creating")
    service.get_sandbox("error")  # the wait stops here: no resume, no further poll
    for _ in range(4):  # the first try and three retries
        service.destroy_sandbox(http=503)
    with pytest.raises(
        cs.CreateosCleanupError, match="destroying the sandbox failed: it may still be running"
    ) as caught:
        client.lease().open()
    assert caught.value.sandbox_id == SANDBOX and caught.value.sandbox_destroyed is False
    assert isinstance(caught.value.__cause__, cs.SandboxUnavailable)


def test_lost_creation_reply_finds_the_sandbox_by_name_and_destroys_it(
    client: Client, service: Service
) -> None:
    service.create_sandbox(http=502)

    def listing(request: Any) -> tuple[int, dict[str, str], str]:
        name = json.loads(service.calls("POST", "/sandboxes")[0].request.body)["name"]
        page = {
            "data": [sandbox(name="other", sandbox_id="sb-x"), sandbox(name=name)],
            "pagination": {"total": 2, "limit": 500, "offset": 0},
        }
        return 200, {}, json.dumps({"status": "success", "data": page})

    service.mock.add_callback("GET", API + "/sandboxes", callback=listing)
    service.destroy_sandbox()
    with pytest.raises(cs.CreateosApiError) as caught:
        client.lease().open()
    assert caught.value.status == 502
    assert "no sandbox named" in str(caught.value) and "destroyed" in str(caught.value)
    assert [c.request.url.split("/v1")[1] for c in service.calls("DELETE")] == [
        f"/sandboxes/{SANDBOX}"
    ]
    assert len(service.calls("POST", "/sandboxes")) == 1  # creation is never repeated


def test_lost_creation_reply_that_cannot_be_checked_is_a_cleanup_error(
    client: Client, service: Service
) -> None:
    service.create_sandbox(http=502)
    for _ in range(4):
        service.add("GET", "/sandboxes", 500)
    with pytest.raises(cs.CreateosCleanupError, match="createos-sync ls"):
        client.lease().open()


def test_attach_resumes_a_paused_sandbox_and_keeps_it(client: Client, service: Service) -> None:
    service.get_sandbox("paused")
    service.add("POST", f"/sandboxes/{SANDBOX}/resume", 202, {"id": SANDBOX, "status": "resuming"})
    service.get_sandbox("resuming")
    service.get_sandbox("running")
    with cs.lease(sandbox_id=SANDBOX, client=client) as box:
        assert box.status == "running"
    assert not service.calls("DELETE")  # on_exit defaults to keep when attaching


def test_attach_to_destroyed_sandbox_says_so(client: Client, service: Service) -> None:
    service.get_sandbox("destroyed")
    with pytest.raises(cs.SandboxUnavailable, match="destroyed"):
        client.lease(sandbox_id=SANDBOX).open()


# --- closing: on_exit ----------------------------------------------------------


def test_on_exit_pause_waits_until_paused(client: Client, service: Service) -> None:
    service.open_running()
    service.add("POST", f"/sandboxes/{SANDBOX}/pause", 202, {"id": SANDBOX, "status": "pausing"})
    service.get_sandbox("pausing")
    service.get_sandbox("paused")
    service.stop_watchdog()
    with client.lease(on_exit="pause") as box:
        pass
    [stop] = service.calls("DELETE")  # the watchdog terminated before the pause, nothing else
    assert box.closed and stop.request.url.split("?")[0].endswith("/processes/proc-ttl")
    assert service.mock.calls.index(stop) < service.mock.calls.index(service.calls("POST")[-1])


def test_failed_destroy_is_never_hidden(client: Client, service: Service) -> None:
    service.open_running()
    for _ in range(4):
        service.destroy_sandbox(http=500)
    box = client.lease().open()
    with pytest.raises(
        cs.CreateosCleanupError, match="could not be destroyed: it may still be running"
    ) as caught:
        box.close()
    assert caught.value.sandbox_destroyed is False and caught.value.sandbox_id == SANDBOX
    box.close()  # idempotent: nothing more is sent
    assert len(service.calls("DELETE")) == 4


def test_body_exception_propagates_unchanged_with_the_cleanup_failure_attached(
    client: Client, service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    service.open_running()
    for _ in range(4):
        service.destroy_sandbox(http=500)
    with pytest.raises(ZeroDivisionError) as caught, client.lease():
        1 / 0  # noqa: B018
    assert cs.is_cleanup_error(caught.value)
    assert any(
        "CreateosCleanupError" in note and SANDBOX in note for note in caught.value.__notes__
    )
    assert any(r.levelno >= logging.ERROR and SANDBOX in r.getMessage() for r in caplog.records)


# --- closing: the containment rule for unfinished processes ---------------------


def test_unfinished_process_is_terminated_on_close(
    client: Client, service: Service, release: threading.Event
) -> None:
    service.open_running()
    box = client.lease().open()
    proc = start_background(box, service, release)
    assert proc.running
    service.terminate(tree_exited=True)
    service.destroy_sandbox()
    box.close()
    release.set()
    assert len(service.calls("DELETE", f"/processes/{PROCESS}")) == 1
    assert proc.wait(5).timed_out


def test_termination_failing_once_is_retried_once(
    client: Client, service: Service, release: threading.Event
) -> None:
    service.open_running()
    box = client.lease().open()
    start_background(box, service, release)
    service.terminate(http=502)
    service.terminate(tree_exited=True)
    service.destroy_sandbox()
    box.close()
    assert len(service.calls("DELETE", f"/processes/{PROCESS}")) == 2


def test_termination_404_counts_as_confirmed(
    client: Client, service: Service, release: threading.Event
) -> None:
    service.open_running()
    box = client.lease(on_exit="keep").open()
    start_background(box, service, release)
    service.terminate(http=404)
    service.stop_watchdog()
    box.close()
    assert len(service.calls("DELETE", f"/processes/{PROCESS}")) == 1


def test_tree_still_running_is_confirmed_by_a_later_read(
    client: Client, service: Service, release: threading.Event
) -> None:
    service.open_running()
    box = client.lease(on_exit="keep").open()
    start_background(box, service, release)
    service.terminate(tree_exited=False)
    service.terminate(tree_exited=False)
    service.get_process(tree_exited=True)
    service.stop_watchdog()
    box.close()
    assert service.calls("DELETE")  # the processes' termination was sent ...
    assert service.destroys() == []  # ... and the sandbox, kept, was not destroyed


@pytest.mark.parametrize("destroy_status", [200, 500])
def test_termination_failing_twice_destroys_the_sandbox_and_says_so(
    client: Client, service: Service, release: threading.Event, destroy_status: int
) -> None:
    service.open_running()
    box = client.lease(on_exit="keep").open()
    start_background(box, service, release)
    service.terminate(http=502)
    service.terminate(http=502)
    service.get_process(tree_exited=False)
    for _ in range(1 if destroy_status == 200 else 4):
        service.destroy_sandbox(http=destroy_status)
    with pytest.raises(
        cs.CreateosCleanupError,
        match="containment unconfirmed: termination of process proc-1 could not be confirmed",
    ) as caught:
        box.close()
    error = caught.value
    assert error.sandbox_id == SANDBOX and error.process_ids == (PROCESS,)
    assert error.sandbox_destroyed is (destroy_status == 200)
    assert PROCESS in str(error) and SANDBOX in str(error)
    assert len(service.calls("DELETE", f"/processes/{PROCESS}")) == 2


def test_ambiguous_process_creation_poisons_the_lease(client: Client, service: Service) -> None:
    service.open_running()
    box = client.lease(on_exit="keep").open()
    service.create_process(http=502)
    with pytest.raises(cs.CreateosApiError) as caught:
        box.run("true")
    assert caught.value.status == 502 and caught.value.outcome_unknown
    assert "poisoned" in str(caught.value)
    assert len(service.calls("POST", "/processes")) == 1  # never created twice
    before = len(service.mock.calls)
    with pytest.raises(cs.CreateosCleanupError, match="this lease is poisoned"):
        box.run("true")
    assert len(service.mock.calls) == before
    service.destroy_sandbox()
    with pytest.raises(cs.CreateosCleanupError) as closed:
        box.close()
    assert closed.value.sandbox_destroyed is True and "unknown outcome" in str(closed.value)


def test_refused_process_creation_does_not_poison(client: Client, service: Service) -> None:
    service.open_running()
    box = client.lease().open()
    service.create_process(http=400)
    with pytest.raises(cs.CreateosApiError, match="HTTP 400 during process creation") as caught:
        box.run("true")
    assert caught.value.status == 400 and not caught.value.outcome_unknown
    service.destroy_sandbox()
    box.close()


def test_closed_lease_refuses_further_work(client: Client, service: Service) -> None:
    service.open_running()
    service.destroy_sandbox()
    with client.lease() as box:
        pass
    with pytest.raises(cs.LeaseClosed, match="this lease is closed"):
        box.run("true")
    with pytest.raises(cs.LeaseClosed, match="leases cannot be reopened"):
        box.open()


def test_exit_hook_closes_forgotten_leases(client: Client, service: Service) -> None:
    from createos_sync.lease import _registry

    service.open_running()
    service.destroy_sandbox()
    box = client.lease().open()
    assert box in cs.leases()
    _registry._close_at_exit()
    assert box.closed and box not in cs.leases()
    assert len(service.calls("DELETE")) == 1


def test_close_all_closes_every_open_lease(client: Client, service: Service) -> None:
    service.open_running()
    service.open_running()
    service.destroy_sandbox()
    service.destroy_sandbox()
    leases = [client.lease().open(), client.lease().open()]
    cs.close_all()
    assert all(lease.closed for lease in leases) and cs.leases() == []


def test_lease_without_key_names_the_variable() -> None:
    with pytest.raises(cs.ConfigError, match="CREATEOS_API_KEY"):
        cs.lease()


def test_repr_never_shows_the_key(client: Client) -> None:
    assert KEY not in repr(client) and KEY not in repr(client.config)
    assert KEY not in repr(client.lease())


@responses.activate
def test_lease_from_environment_owns_its_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CREATEOS_API_KEY", KEY)
    monkeypatch.setenv("CREATEOS_API_URL", "https://api.test/v1/")
    monkeypatch.setenv("CREATEOS_SHAPE", "s-4vcpu-8gb")
    responses.add("POST", API + "/sandboxes", json={"status": "success", "data": sandbox()})
    responses.add(
        "POST", API + f"/sandboxes/{SANDBOX}/processes",
        json={"status": "success", "data": {"process_id": "proc-ttl"}},
    )  # fmt: skip
    responses.add("DELETE", API + f"/sandboxes/{SANDBOX}", json={"status": "success", "data": {}})
    with cs.lease() as box:
        assert box.client.config.base_url == "https://api.test"
    assert json.loads(responses.calls[0].request.body)["shape"] == "s-4vcpu-8gb"
    assert responses.calls[0].request.headers["X-Api-Key"] == KEY


def test_journal_records_the_sandbox_until_it_is_destroyed(
    client: Client, service: Service
) -> None:
    from createos_sync.journal import Journal

    journal = Journal()
    service.open_running()
    service.destroy_sandbox()
    with client.lease() as box:
        [entry] = journal.entries()
        assert entry.sandbox_id == SANDBOX and entry.name.startswith("createos-sync-")
        assert entry.base_url == "https://api.test" and entry.owner_alive()
    assert box.closed and journal.entries() == []


def test_journal_keeps_a_sandbox_whose_destroy_failed(client: Client, service: Service) -> None:
    from createos_sync.journal import Journal

    service.open_running()
    for _ in range(4):
        service.destroy_sandbox(http=503)
    with (
        pytest.raises(
            cs.CreateosCleanupError, match="could not be destroyed: it may still be running"
        ),
        client.lease(),
    ):
        pass
    assert [e.sandbox_id for e in Journal().entries()] == [SANDBOX]


def test_journal_forgets_a_refused_creation(client: Client, service: Service) -> None:
    from createos_sync.journal import Journal

    service.create_sandbox(http=400)
    with pytest.raises(cs.CreateosApiError, match="HTTP 400 during sandbox creation"):
        client.lease().open()
    assert Journal().entries() == []


# --- a creation answer without a usable id is a lost answer (issue 9, item 1) ----------------

UNUSABLE_IDS = {
    "missing": None, "empty": "", "a path": "../x", "a number": 42, "too long": "s" * 129
}  # fmt: skip


def _listing_of(service: Service, sandbox_id: object) -> Any:
    """A listing naming the sandbox this lease asked for, with ``sandbox_id``."""

    def listing(request: Any) -> tuple[int, dict[str, str], str]:
        name = json.loads(service.calls("POST", "/sandboxes")[0].request.body)["name"]
        page = {"data": [sandbox(name=name, sandbox_id=sandbox_id)], "pagination": {"total": 1}}
        return 200, {}, json.dumps({"status": "success", "data": page})

    return listing


@pytest.mark.parametrize("unusable", UNUSABLE_IDS.values(), ids=UNUSABLE_IDS.keys())
def test_creation_answer_without_a_usable_id_is_recovered_by_name(
    client: Client, service: Service, unusable: object
) -> None:
    from createos_sync.journal import Journal

    answer = {k: v for k, v in sandbox("running").items() if k != "id"}
    if unusable is not None:
        answer["id"] = unusable
    service.create_sandbox(body=answer)
    service.mock.add_callback("GET", API + "/sandboxes", callback=_listing_of(service, SANDBOX))
    service.destroy_sandbox()
    with pytest.raises(cs.ProtocolError) as caught:
        client.lease().open()
    assert "not a plausible id" in str(caught.value)
    assert "no sandbox named createos-sync-" in str(caught.value)
    assert [c.request.url.split("/v1")[1] for c in service.calls("DELETE")] == [
        f"/sandboxes/{SANDBOX}"
    ]
    assert len(service.calls("POST", "/sandboxes")) == 1  # never repeated
    assert Journal().entries() == []


def test_creation_answer_without_a_usable_id_and_no_usable_listing_is_a_cleanup_error(
    client: Client, service: Service
) -> None:
    from createos_sync.journal import Journal

    service.create_sandbox(body=sandbox("running", sandbox_id=""))
    service.mock.add_callback("GET", API + "/sandboxes", callback=_listing_of(service, "../x"))
    with pytest.raises(cs.CreateosCleanupError) as caught:
        client.lease().open()
    (entry,) = Journal().entries()  # kept for `createos-sync reap`
    assert entry.name in str(caught.value) and entry.sandbox_id is None
    assert caught.value.sandbox_destroyed is False
    assert not service.calls("DELETE")  # nothing is ever sent to /v1/sandboxes/


def test_process_creation_answer_without_a_usable_id_poisons_the_lease(
    client: Client, service: Service
) -> None:
    service.open_running()
    box = client.lease(on_exit="keep").open()
    service.create_process(body={"pid": 42, "state": "running", "process_id": ""})
    with pytest.raises(cs.ProtocolError) as caught:
        box.run("true")
    assert "poisoned" in str(caught.value) and SANDBOX in str(caught.value)
    with pytest.raises(cs.CreateosCleanupError, match="this lease is poisoned"):
        box.run("true")  # refused before any request
    service.destroy_sandbox()
    with pytest.raises(cs.CreateosCleanupError) as closed:
        box.close()
    assert closed.value.sandbox_destroyed is True and "unknown outcome" in str(closed.value)


# --- the journal must be writable, unless the user opted out (issue 9, item 4) --------------


def test_an_unwritable_journal_stops_open_before_any_request(
    client: Client,
    service: Service,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("CREATEOS_SYNC_STATE_DIR", str(tmp_path / "file" / "state"))
    box = client.lease()
    with pytest.raises(cs.ConfigError, match="journal=False") as caught:
        box.open()
    assert str(tmp_path / "file" / "state") in str(caught.value)
    assert "could not be updated" not in caplog.text  # one clear error, no noise
    assert len(service.mock.calls) == 0 and box.closed  # nothing was asked for


@pytest.mark.parametrize("opt_out", ["argument", "environment"])
def test_a_lease_without_journal_keeps_no_record(
    client: Client, service: Service, monkeypatch: pytest.MonkeyPatch, opt_out: str
) -> None:
    from createos_sync.journal import Journal

    if opt_out == "environment":
        monkeypatch.setenv("CREATEOS_SYNC_JOURNAL", "off")
    service.open_running()
    service.destroy_sandbox()
    with client.lease(journal=opt_out == "environment") as box:
        assert box.id == SANDBOX
        assert not Journal().path.exists()
    assert len(service.mock.calls) == 3  # the creation, the ttl watchdog, the destroy


def test_a_misspelt_journal_setting_is_refused_before_any_request(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CREATEOS_SYNC_JOURNAL", "of")
    with pytest.raises(cs.ConfigError, match="CREATEOS_SYNC_JOURNAL"):
        client.lease()


# --- close() during open(): close wins (issue 9, item 7) -------------------------------------


def test_close_during_open_wins(client: Client, service: Service) -> None:
    from createos_sync.journal import Journal

    polled, closing = threading.Event(), threading.Event()

    def poll(request: Any) -> tuple[int, dict[str, str], str]:
        polled.set()
        closing.wait(10)  # close() has begun: the sandbox then turns out to be running
        return 200, {}, json.dumps({"status": "success", "data": sandbox("running")})

    service.create_sandbox("creating")
    service.mock.add_callback("GET", API + f"/sandboxes/{SANDBOX}", callback=poll)
    service.destroy_sandbox()
    box = client.lease()
    outcome: list[BaseException | None] = []

    def opening() -> None:
        try:
            box.open()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    opener = threading.Thread(target=opening)
    opener.start()
    assert polled.wait(10)
    closer = threading.Thread(target=box.close)
    closer.start()
    wait_until(lambda: box._state == "closing", "close() to begin")
    closing.set()
    closer.join(10)
    opener.join(10)
    assert not closer.is_alive() and not opener.is_alive()
    (raised,) = outcome
    assert isinstance(raised, cs.LeaseClosed), raised
    assert box.closed and box not in cs.leases()
    assert len(service.calls("DELETE", f"/sandboxes/{SANDBOX}")) == 1  # open() undid itself
    assert Journal().entries() == []
    with pytest.raises(cs.LeaseClosed, match="this lease is closed"):
        box.run("true")


def test_journal_false_writes_no_entry_even_when_the_destroy_fails(
    client: Client, service: Service
) -> None:
    """An in-process emulator's sandboxes die with it: such leases opt out of the journal."""
    from createos_sync.journal import Journal

    journal = Journal()
    service.open_running()
    for _ in range(4):
        service.destroy_sandbox(http=503)
    with (
        pytest.raises(
            cs.CreateosCleanupError, match="could not be destroyed: it may still be running"
        ),
        client.lease(journal=False),
    ):
        assert journal.entries() == []
    assert journal.entries() == []
    assert not journal.path.exists()  # not even an empty journal file was written


@pytest.mark.parametrize("status", ["failed", "error", "destroying", "destroyed"])
def test_a_waiting_open_stops_at_a_state_that_will_not_serve(
    client: Client, service: Service, sleeps: list[float], status: str
) -> None:
    service.create_sandbox("creating")
    service.get_sandbox("creating")
    service.get_sandbox(status)  # stops here: no further poll until the deadline
    service.destroy_sandbox()
    with pytest.raises(cs.SandboxUnavailable) as caught:
        client.lease().open()
    assert caught.value.status == status and SANDBOX in str(caught.value)
    # one pause before the first poll (the answer said "creating"), one between the two polls
    assert len(service.calls("GET")) == 2 and len(sleeps) == 2


def test_a_waiting_resume_stops_at_error(
    client: Client, service: Service, sleeps: list[float]
) -> None:
    service.open_running()
    box = client.lease().open()
    service.get_sandbox("paused")
    service.add("POST", f"/sandboxes/{SANDBOX}/resume", 202, {"id": SANDBOX, "status": "resuming"})
    service.get_sandbox("resuming")
    service.get_sandbox("error")
    with pytest.raises(cs.SandboxUnavailable, match=f"sandbox {SANDBOX} is error"):
        box.resume()
    assert len(service.calls("POST", "/resume")) == 1  # error is not resumed again and again
    service.close(box)


def test_a_hostile_sandbox_status_is_never_shown(client: Client, service: Service) -> None:
    service.create_sandbox("creating")
    service.get_sandbox(f"broken {KEY}")
    service.destroy_sandbox()
    with pytest.raises(cs.SandboxUnavailable) as caught:
        client.lease().open()
    assert KEY not in str(caught.value) and caught.value.status == "(unrecognised)"
