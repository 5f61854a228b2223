"""The ttl watchdog over the wire: its creation, renewals, retries, disarming, expiry."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
import requests

import createos_sync as cs
from createos_sync import Client
from createos_sync._commands.command import Command, Gate
from createos_sync._commands.execution import launch
from createos_sync._sandboxes.background import Job
from createos_sync._sandboxes.box import Box
from createos_sync._sandboxes.watchdog import HOLD, SCRIPT, STOP, Watchdog
from createos_sync._wire.deadline import Deadline

from ..waiting import wait_until
from .wire import API, SANDBOX, WATCHDOG, Service, process

TTL = 20.0
PERIOD = TTL / 3


class FakeScheduler:
    """Records jobs instead of running them; a test runs them when it wants."""

    def __init__(self) -> None:
        self.jobs: list[tuple[float, Job]] = []

    def call_later(
        self, delay: float, action: Callable[[], object], *, name: str, own_thread: bool = False
    ) -> Job:
        job = Job(delay, action, name, own_thread)
        self.jobs.append((delay, job))
        return job

    def next_delay(self) -> float:
        live = [delay for delay, job in self.jobs if not job.cancelled]
        assert len(live) == 1, f"expected one pending renewal, found {len(live)}"
        return live[0]

    def run_next(self) -> None:
        [job] = [job for _, job in self.jobs if not job.cancelled]
        job.cancel()  # what the real scheduler does: a job runs once
        job.action()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fake() -> FakeScheduler:
    return FakeScheduler()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def watchdog(client: Client, service: Service, fake: FakeScheduler, clock: Clock) -> Watchdog:
    """An armed watchdog (its creation, 1 request, is made here)."""
    dog = Watchdog(TTL, scheduler=lambda: fake, clock=clock)  # type: ignore[arg-type,return-value]
    service.watchdog()
    dog.arm(Box(client._transport, SANDBOX, sleep=lambda s: None), Deadline.after(10))
    return dog


def writes(service: Service) -> list[bytes]:
    return [c.request.body for c in service.calls("PUT", "/files")]


def test_arming_is_one_process_creation_of_the_bash_script(
    watchdog: Watchdog, service: Service, fake: FakeScheduler
) -> None:
    [call] = service.mock.calls
    body = json.loads(call.request.body)
    assert body["cmd"] == "/bin/bash"
    assert body["args"] == ["-c", SCRIPT, "createos-sync-ttl", watchdog.name, "20", "2"]
    assert watchdog.process_id == WATCHDOG and watchdog.state == "armed"
    assert fake.next_delay() == pytest.approx(PERIOD)  # the first renewal, a third of the ttl on


def test_each_renewal_is_one_write_of_a_new_counter(
    watchdog: Watchdog, service: Service, fake: FakeScheduler
) -> None:
    for _ in range(3):
        service.ttl_write()
        fake.run_next()
        assert fake.next_delay() == pytest.approx(PERIOD)
    assert writes(service) == [b"1\n", b"2\n", b"3\n"]
    paths = [c.request.params["path"] for c in service.calls("PUT", "/files")]
    assert set(paths) == {f"/tmp/{watchdog.name}"}
    assert len(service.mock.calls) == 1 + 3


def test_failed_renewals_are_retried_sooner_and_warn_before_the_deadline(
    watchdog: Watchdog,
    service: Service,
    fake: FakeScheduler,
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="createos_sync.watchdog")
    delays = []
    clock.now += PERIOD
    for _ in range(5):
        service.ttl_write(http=400)  # refused: the transport does not repeat it
        fake.run_next()
        delays.append(fake.next_delay())
        clock.now += delays[-1]
    assert delays == [1.0, 2.0, 4.0, pytest.approx(PERIOD), pytest.approx(PERIOD)]
    assert len(writes(service)) == 5  # one request per attempt
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "may delete it" in warnings[0].getMessage()
    service.ttl_write()
    fake.run_next()  # a renewal that lands ends the streak
    assert fake.next_delay() == pytest.approx(PERIOD)


def test_a_sandbox_found_gone_past_the_ttl_makes_the_next_call_raise_lease_expired(
    watchdog: Watchdog, service: Service, fake: FakeScheduler, clock: Clock
) -> None:
    clock.now += TTL + 5  # frozen for longer than the ttl
    service.ttl_write(http=404)
    service.add("GET", f"/sandboxes/{SANDBOX}", 404)
    fake.run_next()
    assert watchdog.gone and fake.jobs[-1][1].cancelled
    with pytest.raises(cs.LeaseExpired, match=SANDBOX) as caught:
        watchdog.verify()
    assert caught.value.sandbox_id == SANDBOX and isinstance(caught.value, cs.SandboxUnavailable)
    assert len(service.mock.calls) == 1 + 2  # no request more for the verdict


def test_a_sandbox_destroyed_by_someone_else_is_not_called_expired(
    watchdog: Watchdog, service: Service, fake: FakeScheduler, clock: Clock
) -> None:
    clock.now += PERIOD
    service.ttl_write(http=404)
    service.get_sandbox("destroyed")
    fake.run_next()
    with pytest.raises(cs.SandboxUnavailable, match="was destroyed outside this lease") as caught:
        watchdog.verify()
    assert not isinstance(caught.value, cs.LeaseExpired)


@pytest.mark.parametrize(("late", "expired"), [(TTL, True), (PERIOD, False)])
def test_a_sandbox_found_destroyed_under_a_command_is_lease_expired_when_the_ttl_ran_out(
    watchdog: Watchdog, client: Client, service: Service, clock: Clock, late: float, expired: bool
) -> None:
    """The engines' own finding (a creation refused 409, then the sandbox read 404) goes
    through ``Box.explain``: the watchdog names it when its ttl could have run out."""
    box = Box(client._transport, SANDBOX, sleep=lambda s: None, explain=watchdog.explain)
    clock.now += late  # renewals stopped landing that long ago (cut off from the service)
    service.create_process(http=409)
    service.add("GET", f"/sandboxes/{SANDBOX}", 404)
    command = Command.parse("true")
    with pytest.raises(cs.SandboxUnavailable, match=SANDBOX) as caught:
        launch(box, command, gate=Gate.STDIN_EOF, stdin=None, deadline=Deadline.after(5))
    assert isinstance(caught.value, cs.LeaseExpired) is expired
    assert watchdog.gone  # close() is quiet: nothing is left
    with pytest.raises(
        cs.LeaseExpired if expired else cs.SandboxUnavailable, match="sandbox sb-1 is destroyed: "
    ):
        watchdog.verify()
    assert len(service.mock.calls) == 1 + 2  # no renewal, no request more for the verdict


def test_verify_is_free_while_renewals_land(watchdog: Watchdog, service: Service) -> None:
    for _ in range(3):
        watchdog.verify()
    assert len(service.mock.calls) == 1


def test_an_overdue_lease_checks_in_once_before_a_call(
    watchdog: Watchdog, service: Service, clock: Clock
) -> None:
    clock.now += TTL  # the program was frozen: the background renewals never ran
    service.ttl_write()
    watchdog.verify()  # it lived: renewed, and the call goes on
    assert writes(service) == [b"1\n"]
    watchdog.verify()
    assert len(service.mock.calls) == 2
    clock.now += TTL
    service.ttl_write(http=404)
    service.add("GET", f"/sandboxes/{SANDBOX}", 404)
    with pytest.raises(
        cs.LeaseExpired, match="its ttl watchdog deleted it after 20 s without renewal"
    ):
        watchdog.verify()


def test_a_paused_sandbox_is_not_a_failed_renewal(
    watchdog: Watchdog, service: Service, fake: FakeScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    service.ttl_write(http=409)  # not running: its watchdog is frozen with it
    fake.run_next()
    assert fake.next_delay() == pytest.approx(PERIOD)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_hold_rearm_and_stop_are_one_write_each(
    watchdog: Watchdog, service: Service, fake: FakeScheduler
) -> None:
    service.ttl_write()
    watchdog.hold()
    assert watchdog.state == "held" and fake.jobs[-1][1].cancelled
    service.ttl_write()
    watchdog.rearm()
    assert fake.next_delay() == pytest.approx(PERIOD)
    service.stop_watchdog()
    watchdog.stop()  # at close: terminated, confirmed
    assert writes(service) == [HOLD, b"1\n"]
    assert all(job.cancelled for _, job in fake.jobs)
    watchdog.stop()
    watchdog.cancel()
    assert len(service.mock.calls) == 1 + 3


def test_hold_of_a_sandbox_paused_behind_the_leases_back_is_no_error(
    watchdog: Watchdog, service: Service, fake: FakeScheduler
) -> None:
    service.ttl_write(http=409)  # auto-paused, say: its watchdog is frozen with it
    watchdog.hold()
    assert watchdog.state == "held" and all(job.cancelled for _, job in fake.jobs)


def test_a_held_watchdog_at_close_gets_one_stop_write_and_its_failure_is_no_error(
    watchdog: Watchdog, service: Service
) -> None:
    service.ttl_write()
    watchdog.hold()
    service.ttl_write(http=409)  # the sandbox is paused: nothing runs, and hold never fires
    watchdog.stop()
    assert writes(service) == [HOLD, STOP] and watchdog.state == "stopped"
    assert not service.calls("DELETE")  # no termination sent to a paused sandbox


def test_resumed_arms_a_watchdog_never_started_and_rearms_one_held(
    client: Client, service: Service, fake: FakeScheduler, clock: Clock
) -> None:
    """A fork made start_paused opens paused: its first resume starts its watchdog."""
    dog = Watchdog(TTL, scheduler=lambda: fake, clock=clock)  # type: ignore[arg-type,return-value]
    box = Box(client._transport, SANDBOX, sleep=lambda s: None)
    service.watchdog()
    dog.resumed(box, Deadline.after(10))
    assert dog.state == "armed" and dog.process_id == WATCHDOG
    service.ttl_write()
    dog.hold()
    service.ttl_write()
    dog.resumed(box, Deadline.after(10))
    assert dog.state == "armed" and writes(service) == [HOLD, b"1\n"]
    # One creation, then the hold and the re-arm: never a second watchdog.
    assert [c.request.method for c in service.mock.calls] == ["POST", "PUT", "PUT"]


def test_an_unconfirmed_stop_falls_back_on_the_stop_file(
    watchdog: Watchdog, service: Service
) -> None:
    for _ in range(2):
        service.stop_watchdog(tree_exited=False)
    still = process(tree_exited=False)
    service.add("GET", f"/sandboxes/{SANDBOX}/processes/{WATCHDOG}", body=still)
    service.ttl_write()
    watchdog.stop()
    assert writes(service) == [STOP] and watchdog.state == "stopped"


def test_a_renewal_due_during_a_hold_sends_nothing(
    watchdog: Watchdog, service: Service, fake: FakeScheduler
) -> None:
    stale = fake.jobs[-1][1]
    service.ttl_write()
    watchdog.hold()
    stale.action()  # a tick that was already on its way
    assert writes(service) == [HOLD]


def test_a_lost_creation_answer_is_resolved_by_the_process_list(
    client: Client, service: Service, fake: FakeScheduler, clock: Clock
) -> None:
    dog = Watchdog(TTL, scheduler=lambda: fake, clock=clock)  # type: ignore[arg-type,return-value]
    service.add("POST", f"/sandboxes/{SANDBOX}/processes", body=requests.ConnectionError("reset"))
    listed = process(process_id="proc-found", args=["-c", "...", "createos-sync-ttl", dog.name])
    service.add("GET", f"/sandboxes/{SANDBOX}/processes", body={"processes": [listed]})
    dog.arm(Box(client._transport, SANDBOX), Deadline.after(10))
    assert dog.process_id == "proc-found" and dog.state == "armed"
    assert len(service.mock.calls) == 2  # never created twice


def test_a_lost_creation_answer_not_found_fails_and_stops_any_watchdog(
    client: Client, service: Service, fake: FakeScheduler, clock: Clock
) -> None:
    dog = Watchdog(TTL, scheduler=lambda: fake, clock=clock)  # type: ignore[arg-type,return-value]
    service.add("POST", f"/sandboxes/{SANDBOX}/processes", body=requests.ConnectionError("reset"))
    service.add("GET", f"/sandboxes/{SANDBOX}/processes", body={"processes": []})
    service.ttl_write()
    with pytest.raises(cs.CreateosApiError, match="no answer during ttl watchdog"):
        dog.arm(Box(client._transport, SANDBOX), Deadline.after(10))
    assert writes(service) == [STOP] and fake.jobs == []


@pytest.mark.parametrize("listed_id", ["", "../../sandboxes/sb-other", 42, None])
def test_a_lost_creation_answer_listed_without_a_usable_id_fails_and_stops_any_watchdog(
    client: Client, service: Service, fake: FakeScheduler, clock: Clock, listed_id: object
) -> None:
    # The id found goes into the path of the watchdog's termination: checked like any id.
    dog = Watchdog(TTL, scheduler=lambda: fake, clock=clock)  # type: ignore[arg-type,return-value]
    service.add("POST", f"/sandboxes/{SANDBOX}/processes", body=requests.ConnectionError("reset"))
    listed = process(process_id=listed_id, args=["-c", "...", "createos-sync-ttl", dog.name])
    service.add("GET", f"/sandboxes/{SANDBOX}/processes", body={"processes": [listed]})
    service.ttl_write()
    with pytest.raises(cs.CreateosApiError, match="no answer during ttl watchdog"):
        dog.arm(Box(client._transport, SANDBOX), Deadline.after(10))
    assert dog.process_id is None
    assert writes(service) == [STOP] and fake.jobs == []


# --- through the lease --------------------------------------------------------


def test_a_lease_without_ttl_starts_no_watchdog(client: Client, service: Service) -> None:
    service.create_sandbox()
    service.destroy_sandbox()
    with client.lease(ttl=None):
        pass
    assert [c.request.method for c in service.mock.calls] == ["POST", "DELETE"]


def test_an_attached_lease_has_no_ttl_unless_given(client: Client, service: Service) -> None:
    service.get_sandbox("running")
    with client.lease(sandbox_id=SANDBOX):
        pass
    service.get_sandbox("running")
    service.watchdog()
    service.stop_watchdog()
    with client.lease(sandbox_id=SANDBOX, ttl=60):
        pass
    assert [c.request.method for c in service.mock.calls[1:]] == ["GET", "POST", "DELETE"]


def test_keep_at_close_stops_the_watchdog_and_a_failed_stop_is_reported(
    client: Client, service: Service
) -> None:
    service.open_running()
    service.stop_watchdog(http=400)
    service.stop_watchdog(http=400)
    service.add("GET", f"/sandboxes/{SANDBOX}/processes/{WATCHDOG}", 400)
    service.ttl_write(http=400)
    lease = client.lease(on_exit="keep").open()
    with pytest.raises(cs.CreateosCleanupError, match="will delete itself within 900 s") as caught:
        lease.close()
    assert caught.value.sandbox_id == SANDBOX and caught.value.sandbox_destroyed is None


def test_destroy_at_close_sends_nothing_to_the_watchdog(client: Client, service: Service) -> None:
    service.open_running()
    service.destroy_sandbox()
    with client.lease():
        pass
    assert not writes(service)


def test_pause_disarms_first_and_resume_rearms_before_returning(
    client: Client, service: Service
) -> None:
    service.open_running()
    with client.lease() as box:
        service.ttl_write()
        service.add("POST", f"/sandboxes/{SANDBOX}/pause", 202, {"id": SANDBOX})
        service.get_sandbox("paused")
        before = len(service.mock.calls)
        box.pause()
        assert len(service.mock.calls) - before == 3  # hold, pause, one poll
        service.get_sandbox("paused")
        service.add("POST", f"/sandboxes/{SANDBOX}/resume", 202, {"id": SANDBOX})
        service.get_sandbox("running")
        service.ttl_write()
        before = len(service.mock.calls)
        box.resume()
        assert len(service.mock.calls) - before == 4  # read, resume, one poll, re-arm
        service.destroy_sandbox()
    assert writes(service) == [HOLD, b"1\n"]
    methods = [c.request.method + " " + c.request.url.split("/v1")[1] for c in service.mock.calls]
    assert methods.index(f"PUT /sandboxes/{SANDBOX}/files?path=%2Ftmp%2F" + box._watchdog.name) < (
        methods.index(f"POST /sandboxes/{SANDBOX}/pause")
    )


def test_a_failed_watchdog_start_destroys_the_sandbox_it_was_for(
    client: Client, service: Service
) -> None:
    service.create_sandbox()
    service.watchdog(http=400)
    service.destroy_sandbox()
    with pytest.raises(cs.CreateosApiError, match="ttl watchdog"):
        client.lease().open()
    assert len(service.calls("DELETE")) == 1


def test_close_winning_over_an_attach_stops_the_watchdog_it_had_started(
    client: Client, service: Service
) -> None:
    """The attached sandbox is not the lease's to destroy: its watchdog must not delete it."""
    lease = client.lease(sandbox_id=SANDBOX, ttl=60)
    closer = threading.Thread(target=lease.close)

    def created(request: Any) -> tuple[int, dict[str, str], str]:
        closer.start()  # close() begins while the watchdog's creation is answered
        wait_until(lambda: lease._state == "closing", "close() to begin")
        return 201, {}, json.dumps({"status": "success", "data": process(process_id=WATCHDOG)})

    service.get_sandbox("running")
    service.mock.add_callback("POST", f"{API}/sandboxes/{SANDBOX}/processes", callback=created)
    service.stop_watchdog()
    with pytest.raises(cs.LeaseClosed, match="the lease was closed while it was opening"):
        lease.open()
    closer.join(10)
    assert [c.request.method for c in service.mock.calls] == ["GET", "POST", "DELETE"]
    assert f"/processes/{WATCHDOG}?" in service.mock.calls[-1].request.url  # not the sandbox
    assert lease.closed and lease._watchdog.state == "stopped"
