"""Forks over the wire: the request, its budget, and the recovery of a lost answer."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import requests

import createos_sync as cs
from createos_sync import Client
from createos_sync._sandboxes.fork import MARKER
from createos_sync.journal import Entry, Journal

from .wire import API, SANDBOX, Service, sandbox

FORK = "sb-fork"
# Forks this process got an answer for stay claimed for its lifetime: lost ones get other ids.
LOST = "sb-lost"
FORK_PATH = f"/sandboxes/{SANDBOX}/fork"


def _ago(seconds: float) -> str:
    moment = datetime.now(timezone.utc) - timedelta(seconds=seconds)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def fork_of(sandbox_id: str, *, age: float = 0.0, source: str = SANDBOX, **extra: Any) -> Any:
    return sandbox(sandbox_id=sandbox_id, forked_from=source, created_at=_ago(age), **extra)


def listing(*items: dict[str, Any]) -> dict[str, Any]:
    return {"data": list(items), "pagination": {"total": len(items), "limit": 500, "offset": 0}}


@pytest.fixture
def parent(client: Client, service: Service) -> Iterator[cs.Lease]:
    service.open_running()
    lease = client.lease().open()
    yield lease
    service.close(lease)


def _fork_bodies(service: Service) -> list[dict[str, Any]]:
    return [json.loads(c.request.body) for c in service.calls("POST", "/fork")]


def _process_creations(service: Service, sandbox_id: str) -> list[Any]:
    """Every process creation in the sandbox, the ttl watchdog's included."""
    return [c for c in service.mock.calls if c.request.url.endswith(f"/{sandbox_id}/processes")]


def _deleted(service: Service) -> list[str]:
    return [c.request.url.split("/sandboxes/")[1] for c in service.calls("DELETE")]


# --- the request -----------------------------------------------------------------


def test_fork_costs_one_request_plus_polls_and_its_watchdog_and_close_destroys_only_the_fork(
    parent: cs.Lease, service: Service
) -> None:
    service.add("POST", FORK_PATH, 201, sandbox("forking", FORK, forked_from=SANDBOX))
    service.add("GET", f"/sandboxes/{FORK}", body=sandbox("running", FORK))
    service.watchdog(sandbox_id=FORK)
    service.add("DELETE", f"/sandboxes/{FORK}", body={"id": FORK, "status": "destroying"})
    before = len(service.mock.calls)

    with parent.fork(env={"A": "1"}, egress=["pypi.org"], ingress=True, name="job") as child:
        assert (child.id, child.status) == (FORK, "running")
        assert len(service.mock.calls) - before == 3  # the fork, its poll, its ttl watchdog

    [body] = _fork_bodies(service)
    envs = body.pop("envs")
    assert envs["A"] == "1" and envs[MARKER].startswith("job-")
    assert body == {"egress": ["pypi.org"], "ingress_enabled": True}  # no name: none on a fork
    assert _deleted(service) == [FORK]
    assert not parent.closed and parent.status == "running"


def test_a_fork_with_defaults_sends_only_its_marker_and_keeps_the_sources_settings(
    parent: cs.Lease, service: Service
) -> None:
    service.add("POST", FORK_PATH, 201, sandbox("running", FORK))
    service.watchdog(sandbox_id=FORK)
    child = parent.fork()
    assert [set(body) for body in _fork_bodies(service)] == [{"envs"}]
    assert [set(body["envs"]) for body in _fork_bodies(service)] == [{MARKER}]
    service.close(child, FORK)


def test_lease_fork_from_journals_the_source_while_the_fork_is_in_flight(
    client: Client, service: Service
) -> None:
    seen: list[list[Entry]] = []

    def answer(request: Any) -> tuple[int, dict[str, str], str]:
        seen.append(Journal().entries())
        return 201, {}, json.dumps({"status": "success", "data": sandbox("running", FORK)})

    service.mock.add_callback("POST", API + FORK_PATH, callback=answer)
    service.watchdog(sandbox_id=FORK)
    service.add("DELETE", f"/sandboxes/{FORK}", body={"id": FORK, "status": "destroying"})
    with client.lease(fork_from=SANDBOX, name="shard") as box:
        [entry] = Journal().entries()
        assert (entry.sandbox_id, entry.fork_from) == (FORK, SANDBOX)
    [[during]] = seen
    assert (during.sandbox_id, during.fork_from) == (None, SANDBOX)
    assert during.name.startswith("shard-")
    assert Journal().entries() == [] and box.closed


def test_start_paused_opens_on_a_paused_fork_and_run_says_to_resume(
    parent: cs.Lease, service: Service
) -> None:
    service.add("POST", FORK_PATH, 201, sandbox("forking", FORK))
    service.add("GET", f"/sandboxes/{FORK}", body=sandbox("paused", FORK))
    child = parent.fork(start_paused=True)
    assert [body["start_paused"] for body in _fork_bodies(service)] == [True]
    assert child.status == "paused"
    calls = len(service.mock.calls)

    with pytest.raises(cs.SandboxUnavailable, match=r"resume\(\) first"):
        child.run("true")
    with pytest.raises(cs.SandboxUnavailable, match=r"resume\(\) first"):
        child.read_file("/workspace/x")
    assert len(service.mock.calls) == calls  # refused before any request

    assert _process_creations(service, FORK) == []  # opened paused: no ttl watchdog yet
    service.add("GET", f"/sandboxes/{FORK}", body=sandbox("paused", FORK))
    service.add("POST", f"/sandboxes/{FORK}/resume", 202, sandbox("resuming", FORK))
    service.add("GET", f"/sandboxes/{FORK}", body=sandbox("running", FORK))
    service.watchdog(sandbox_id=FORK)
    assert child.resume().status == "running"
    assert len(service.calls("POST", "/resume")) == 1
    # Its ttl watchdog starts at the first resume (a paused sandbox's clock would jump).
    assert _process_creations(service, FORK) == [service.mock.calls[-1]]
    assert child._watchdog.state == "armed"
    service.close(child, FORK)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda box: box.fork(egress="pypi.org"),
            ValueError,
            "egress must be a sequence of rule strings",
        ),
        (
            lambda box: box.fork(env={"1BAD": "x"}),
            ValueError,
            "invalid environment variable name '1BAD'",
        ),
        (
            lambda box: box.fork(start_paused="yes"),
            TypeError,
            "journal and start_paused must be True or False",
        ),
        (lambda box: box.fork(ingress="on"), TypeError, "ingress must be True, False or None"),
        (lambda box: box.fork(ttl=1), ValueError, "ttl must be at least 5 seconds"),
        (
            lambda box: box.fork(on_exit="explode"),
            ValueError,
            "on_exit must be one of destroy, keep, pause",
        ),
        (
            lambda box: cs.lease(start_paused=True, client=box.client),
            ValueError,
            r"start_paused applies to a fork only \(give fork_from\)",
        ),
        (
            lambda box: cs.lease(fork_from="", client=box.client),
            ValueError,
            "fork_from must be a non-empty str",
        ),
        (lambda box: cs.lease(fork_from="sb-x", auto_pause_after=60, client=box.client),
         ValueError, "auto_pause_after cannot be chosen for a fork"),
    ],
)  # fmt: skip
def test_invalid_fork_arguments_raise_before_any_request(
    parent: cs.Lease, service: Service, call: Any, error: type[Exception], message: str
) -> None:
    calls = len(service.mock.calls)
    with pytest.raises(error, match=message):
        call(parent)
    assert len(service.mock.calls) == calls


def test_fork_of_a_closed_lease_raises_lease_closed(client: Client, service: Service) -> None:
    with pytest.raises(cs.LeaseClosed, match="this lease is not open"):
        client.lease().fork()
    assert len(service.mock.calls) == 0


# --- retries and lost answers --------------------------------------------------


def test_503_is_a_refusal_and_the_fork_is_retried(parent: cs.Lease, service: Service) -> None:
    service.add("POST", FORK_PATH, 503)
    service.add("POST", FORK_PATH, 201, sandbox("running", FORK))
    service.watchdog(sandbox_id=FORK)
    child = parent.fork()
    assert child.id == FORK and len(service.calls("POST", "/fork")) == 2
    assert not service.calls("GET", "/sandboxes?")  # no recovery: nothing was unknown
    service.close(child, FORK)


def _lost_fork(service: Service, answer: Any = 502) -> list[str]:
    """The fork's answer is lost (``answer``: a status or an exception); the markers sent."""
    markers: list[str] = []

    def lost(request: Any) -> tuple[int, dict[str, str], str]:
        markers.append(json.loads(request.body)["envs"][MARKER])
        if isinstance(answer, BaseException):
            raise answer
        return answer, {}, json.dumps({"status": "error", "message": "lost"})

    service.mock.add_callback("POST", API + FORK_PATH, callback=lost)
    return markers


def _env_of(service: Service, sandbox_id: str, marker: Callable[[], str]) -> None:
    """The fork's one-shot ``printenv`` of the marker answers ``marker()``."""

    def printenv(request: Any) -> tuple[int, dict[str, str], str]:
        assert json.loads(request.body) == {"cmd": "printenv", "args": [MARKER]}
        value = marker()
        result = {"exit_code": 0 if value else 1, "stdout": f"{value}\n" if value else ""}
        return 200, {}, json.dumps({"status": "success", "data": {"result": result}})

    service.mock.add_callback("POST", f"{API}/sandboxes/{sandbox_id}/exec", callback=printenv)


def test_the_fork_request_carries_the_lease_name_as_its_marker(
    parent: cs.Lease, service: Service
) -> None:
    service.add("POST", FORK_PATH, 201, sandbox("running", FORK))
    service.watchdog(sandbox_id=FORK)
    child = parent.fork(name="job", env={"A": "1"})
    [body] = _fork_bodies(service)
    assert body["envs"]["A"] == "1"
    assert body["envs"][MARKER] == Journal().entries()[-1].name
    assert body["envs"][MARKER].startswith("job-")
    service.close(child, FORK)


def test_a_lost_answer_destroys_only_the_fork_that_carries_its_marker(
    parent: cs.Lease, service: Service
) -> None:
    """Issue 22, items 1 and 2: another lease's fork of the same source (another machine's,
    or a journal=False lease's) is read and left alone; this lease's own is found however
    far off the service's clock is."""
    Journal().add(Entry(name="kept-by-other", base_url="https://api.test", sandbox_id="sb-claimed"))
    markers = _lost_fork(service)
    service.add(
        "GET",
        "/sandboxes",
        body=listing(
            sandbox(),  # the source
            fork_of("sb-theirs"),  # another lease's, made at the same moment
            fork_of("sb-claimed"),  # another lease's, per the journal: not even read
            fork_of("sb-elsewhere", source="sb-other"),  # a fork of another sandbox
            fork_of("sb-gone", status="destroyed"),
            fork_of(LOST, age=3600),  # the lost one, by a service clock an hour behind
        ),
    )
    _env_of(service, "sb-theirs", lambda: "someone-else-0123456789ab")
    _env_of(service, LOST, lambda: markers[0])
    service.add("DELETE", f"/sandboxes/{LOST}", body={"id": LOST, "status": "destroying"})
    before = len(service.mock.calls)

    with pytest.raises(cs.CreateosApiError) as caught:
        parent.fork()

    assert caught.value.status == 502
    assert f"fork {LOST} was found and destroyed" in str(caught.value)
    assert _deleted(service) == [LOST]
    assert [c.request.url.split("/")[-2] for c in service.calls("POST", "/exec")] == [
        "sb-theirs",
        LOST,
    ]
    assert len(service.mock.calls) - before == 5  # fork, listing, 2 marker reads, destroy
    assert [e for e in Journal().entries() if e.fork_from] == []  # nothing left to reap


def test_a_lost_answer_with_only_other_leases_forks_says_none_was_made(
    parent: cs.Lease, service: Service
) -> None:
    _lost_fork(service, 500)
    service.add("GET", "/sandboxes", body=listing(sandbox(), fork_of("sb-a"), fork_of("sb-b")))
    _env_of(service, "sb-a", lambda: "someone-else-0123456789ab")
    _env_of(service, "sb-b", lambda: "")  # a fork made by another client: no marker at all
    with pytest.raises(cs.CreateosApiError, match="no fork of it carrying this lease's marker"):
        parent.fork()
    assert _deleted(service) == []
    assert [e for e in Journal().entries() if e.fork_from] == []  # settled: nothing was made


def test_no_answer_at_all_looks_again_for_a_fork_still_on_its_way(
    parent: cs.Lease, service: Service, sleeps: list[float]
) -> None:
    """As for a creation (``_sandbox.late_looks``): the listing that finds nothing is
    repeated after a pause, since the fork may not be listed yet."""
    markers = _lost_fork(service, requests.ReadTimeout("no answer"))
    service.add("GET", "/sandboxes", body=listing(sandbox(forked_from=None)))
    service.add("GET", "/sandboxes", body=listing(sandbox(forked_from=None), fork_of(LOST)))
    _env_of(service, LOST, lambda: markers[0])
    service.add("DELETE", f"/sandboxes/{LOST}", body={"id": LOST, "status": "destroying"})
    with pytest.raises(cs.CreateosApiError, match=f"fork {LOST} was found and destroyed"):
        parent.fork()
    assert len(service.calls("GET", "/sandboxes?")) == 2 and sleeps == [0.5]
    assert _deleted(service) == [LOST]
    assert len(service.calls("POST", "/fork")) == 1  # never repeated


def test_a_fork_whose_marker_cannot_be_read_is_unsettled_and_keeps_the_journal_entry(
    parent: cs.Lease, service: Service
) -> None:
    """Issue 22, item 2: a paused candidate could be this lease's fork; it is not resumed
    to read it, nothing is destroyed, and the entry stays for reap."""
    _lost_fork(service, 504)
    service.add("GET", "/sandboxes", body=listing(fork_of("sb-paused", status="paused")))
    with pytest.raises(cs.CreateosCleanupError, match="sb-paused") as caught:
        parent.fork()
    assert "could not be read" in str(caught.value)
    assert caught.value.sandbox_destroyed is None
    assert _deleted(service) == [] and not service.calls("POST", "/exec")
    assert len([e for e in Journal().entries() if e.fork_from]) == 1  # it stays, for reap


def test_a_listing_that_does_not_say_which_sandboxes_are_forks_is_a_cleanup_error(
    parent: cs.Lease, service: Service
) -> None:
    _lost_fork(service)
    service.add("GET", "/sandboxes", body=listing(sandbox(), sandbox(sandbox_id="sb-x")))
    with pytest.raises(cs.CreateosCleanupError, match="does not list forks"):
        parent.fork()


def test_an_answer_with_an_implausible_id_is_recovered_like_a_lost_one(
    parent: cs.Lease, service: Service
) -> None:
    sent: list[str] = []

    def answer(request: Any) -> tuple[int, dict[str, str], str]:
        sent.append(json.loads(request.body)["envs"][MARKER])
        body = {"status": "success", "data": sandbox("running", "../../sandboxes/sb-1")}
        return 201, {}, json.dumps(body)

    service.mock.add_callback("POST", API + FORK_PATH, callback=answer)
    service.add("GET", "/sandboxes", body=listing(fork_of(LOST)))
    _env_of(service, LOST, lambda: sent[0])
    service.add("DELETE", f"/sandboxes/{LOST}", body={"id": LOST, "status": "destroying"})
    with pytest.raises(cs.ProtocolError, match="not a plausible id"):
        parent.fork()
    assert _deleted(service) == [LOST]  # never the path the answer suggested
