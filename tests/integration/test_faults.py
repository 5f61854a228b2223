"""Scripted emulator faults driving the SDK's recovery and containment paths for real.

Each test scripts one misbehaviour of the service (``Fault``), then checks
what the SDK did about it in the emulator's request log, what it raised, and
that no sandbox and no process was left behind.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator

import pytest

import createos_sync as cs
from createos_sync import Client, Lease
from createos_sync.emulator import Emulator, Fault

from ..waiting import wait_until
from .helpers import (
    FAST,
    MIXED_LINE_BYTES,
    MIXED_OUTPUT_SCRIPT,
    StreamHasher,
    UrlRecorder,
    mixed_output,
    operations,
    processes_of,
    sha256,
)

# --- output streams --------------------------------------------------------


def test_stream_dropped_after_three_frames_is_replayed_without_loss_or_duplicates(
    emulator: Emulator, managed_path: None
) -> None:
    recorder = UrlRecorder()
    lines = 2_000_000 // MIXED_LINE_BYTES
    expected_out, expected_err = mixed_output(lines)
    with (
        emulator.client(requests_per_minute=FAST, session=recorder.session) as client,
        client.lease() as box,
    ):
        emulator.clear_request_log()
        emulator.faults.add(Fault("process.connect", drop_after_frames=3))

        result = box.run(["python3", "-c", MIXED_OUTPUT_SCRIPT, str(lines)], check=True)

        assert sha256(result.stdout) == sha256(expected_out)
        assert sha256(result.stderr) == sha256(expected_err)
        assert operations(emulator) == [
            ("process.create", 200),
            ("process.connect", 200),  # cut after three data frames
            ("process.stdin_close", 200),
            ("process.connect", 200),  # the same process, from where it stopped
        ]
        assert recorder.queries("/connect") == [{"after": ["0"]}, {"after": ["3"]}]


def test_stream_dropped_before_any_answer_is_reconnected(
    emulator: Emulator, box: Lease, managed_path: None
) -> None:
    emulator.clear_request_log()
    emulator.faults.add(Fault("process.connect", drop=True))

    result = box.run("echo out; echo err >&2", check=True)

    assert (result.stdout, result.stderr) == ("out\n", "err\n")
    assert operations(emulator) == [
        ("process.create", 200),
        ("process.connect", None),  # connection cut without an answer
        ("process.connect", 200),
        ("process.stdin_close", 200),
    ]


@pytest.fixture
def waits() -> list[float]:
    return []


@pytest.fixture
def instant(emulator: Emulator, waits: list[float]) -> Iterator[Client]:
    """A client whose retry and reconnection waits are recorded instead of slept."""
    with emulator.client(requests_per_minute=FAST, sleep=waits.append) as client:
        yield client


def test_streams_that_keep_dropping_give_up_and_terminate_the_process(
    emulator: Emulator, instant: Client, waits: list[float]
) -> None:
    with instant.lease() as box:
        emulator.clear_request_log()
        waits.clear()
        emulator.faults.add(Fault("process.connect", drop=True, times=100))

        with pytest.raises(cs.CreateosApiError) as caught:
            box.run("sleep 1000", timeout=60)

        emulator.faults.clear()
        assert caught.value.status is None
        assert caught.value.operation == "output connection"
        assert processes_of(emulator, box.id) == []
        ops = operations(emulator)
        assert ops[0] == ("process.create", 200)
        assert ("process.delete", 200) in ops
        assert box.run("echo usable").stdout == "usable\n"
    connects = [op for op in ops if op[0] == "process.connect"]
    assert set(connects) == {("process.connect", None)}
    assert ("process.stdin_close", 200) not in ops  # never attached: never released
    assert max(waits) > 0, "reconnections back off"
    # Bounded: the follower gives up after its budget of 5 reconnections without
    # progress, i.e. 6 attempts, and each attempt is one request (were the transport
    # to retry each of them too, the attempts would multiply).
    assert len(connects) <= 6, f"{len(connects)} connection attempts for one dropped stream"


# --- termination (Lease.close, steps 1-4) -----------------------------------


def test_termination_refused_once_is_retried_once(emulator: Emulator, client: Client) -> None:
    with client.lease() as box:
        sandbox_id = box.id
        box.start("sleep 1000")
        emulator.clear_request_log()
        emulator.faults.add(Fault("process.delete", status=503))

    assert operations(emulator) == [
        ("process.delete", 503),
        ("process.delete", 200),
        ("sandbox.delete", 200),
    ]
    assert processes_of(emulator, sandbox_id) == []
    assert sandbox_id not in emulator.live_sandboxes()


def test_unconfirmed_termination_destroys_the_sandbox_and_says_so(
    emulator: Emulator, client: Client
) -> None:
    box = client.lease(on_exit="keep").open()  # destroyed all the same: containment comes first
    sandbox_id = box.id
    process = box.start("sleep 1000")
    # Both terminations answer tree_exited: false and leave the tree running.
    emulator.faults.add(Fault("process.delete", tree_exited_false=True, kill=False, times=2))
    emulator.clear_request_log()

    with pytest.raises(cs.CreateosCleanupError) as caught:
        box.close()

    assert caught.value.sandbox_destroyed is True
    assert caught.value.sandbox_id == sandbox_id
    assert caught.value.process_ids == (process.id,)
    assert operations(emulator) == [
        ("process.delete", 200),
        ("process.delete", 200),
        ("process.get", 200),  # still running: not confirmed either
        ("sandbox.delete", 200),
    ]
    assert processes_of(emulator, sandbox_id) == []
    assert sandbox_id not in emulator.live_sandboxes()
    assert box.closed
    box.close()  # idempotent: the failure was reported once


def test_termination_confirmed_by_a_later_read(emulator: Emulator, client: Client) -> None:
    with client.lease() as box:
        sandbox_id = box.id
        box.start("sleep 1000")
        # The tree IS killed; only the answers say otherwise. The read tells the truth.
        emulator.faults.add(Fault("process.delete", tree_exited_false=True, times=2))
        emulator.clear_request_log()

    assert operations(emulator) == [
        ("process.delete", 200),
        ("process.delete", 200),
        ("process.get", 200),
        ("sandbox.delete", 200),
    ]
    assert sandbox_id not in emulator.live_sandboxes()


def test_ambiguous_process_creation_poisons_the_lease(emulator: Emulator, client: Client) -> None:
    box = client.lease().open()
    sandbox_id = box.id
    # The process is created, but the answer is a 502: nobody knows its id.
    emulator.faults.add(Fault("process.create", status=502, perform=True))

    with pytest.raises(cs.CreateosApiError) as caught:
        box.run("echo never")

    assert caught.value.status == 502
    assert caught.value.outcome_unknown is True
    assert sandbox_id in str(caught.value)
    made = [p for p in emulator.live_processes() if p.sandbox_id == sandbox_id]
    assert len(made) == 2  # it does exist (the lease's command session), beside the watchdog
    emulator.clear_request_log()
    with pytest.raises(cs.CreateosCleanupError, match="this lease is poisoned"):
        box.run("echo refused")
    with pytest.raises(cs.CreateosCleanupError, match="this lease is poisoned"):
        box.start("echo refused")
    assert operations(emulator) == []  # refused before any request

    with pytest.raises(cs.CreateosCleanupError) as closing:
        box.close()

    assert closing.value.sandbox_destroyed is True
    assert closing.value.sandbox_id == sandbox_id
    assert operations(emulator) == [("sandbox.delete", 200)]
    assert processes_of(emulator, sandbox_id) == []
    assert sandbox_id not in emulator.live_sandboxes()


# --- sandbox lifecycle -----------------------------------------------------


def test_lost_sandbox_creation_is_found_by_name_and_destroyed(
    emulator: Emulator, client: Client
) -> None:
    before = set(emulator.live_sandboxes())
    emulator.clear_request_log()
    emulator.faults.add(Fault("sandbox.create", status=502, perform=True))
    lease = client.lease(name="lost-reply")

    with pytest.raises(cs.CreateosApiError) as caught:
        lease.open()

    assert caught.value.status == 502
    assert "lost-reply-" in str(caught.value)
    assert operations(emulator) == [
        ("sandbox.create", 502),
        ("sandbox.list", 200),
        ("sandbox.delete", 200),  # the sandbox that did get created
    ]
    assert set(emulator.live_sandboxes()) == before
    assert lease.closed


def test_sandbox_reads_failing_during_open_are_retried(emulator: Emulator, client: Client) -> None:
    with client.lease(on_exit="keep") as first:
        sandbox_id = first.id
    emulator.clear_request_log()
    emulator.faults.add(Fault("sandbox.get", status=503, times=2))

    # Attaching always reads the sandbox first: that read fails twice.
    with client.lease(sandbox_id=sandbox_id, on_exit="destroy") as box:
        assert box.status == "running"
        assert box.run("echo ok").stdout == "ok\n"

    assert operations(emulator)[:3] == [
        ("sandbox.get", 503),
        ("sandbox.get", 503),
        ("sandbox.get", 200),
    ]
    assert sandbox_id not in emulator.live_sandboxes()


def test_failed_destroy_is_reported_never_hidden(
    emulator: Emulator, instant: Client, waits: list[float]
) -> None:
    client = instant
    box = client.lease().open()
    sandbox_id = box.id
    assert sandbox_id is not None
    emulator.faults.add(Fault("sandbox.delete", status=500, times=10))
    emulator.clear_request_log()
    waits.clear()
    try:
        with pytest.raises(cs.CreateosCleanupError) as caught:
            box.close()

        assert caught.value.sandbox_destroyed is False
        assert caught.value.sandbox_id == sandbox_id
        assert sandbox_id in str(caught.value)
        # Retried with backoff as an idempotent DELETE, max_retries (3) times.
        assert operations(emulator) == [("sandbox.delete", 500)] * 4
        assert len(waits) == 3 and all(w > 0 for w in waits)
        assert sandbox_id in emulator.live_sandboxes()  # really still there
    finally:
        emulator.faults.clear()
        client.destroy(sandbox_id)
    assert sandbox_id not in emulator.live_sandboxes()


def test_body_exception_is_not_masked_by_a_cleanup_failure(
    emulator: Emulator, instant: Client
) -> None:
    client = instant

    class BodyError(Exception):
        pass

    box = client.lease()
    try:
        with pytest.raises(BodyError) as caught, box:
            emulator.faults.add(Fault("sandbox.delete", status=500, times=10))
            raise BodyError("from the with body")

        assert str(caught.value) == "from the with body"
        assert cs.is_cleanup_error(caught.value)
        notes = getattr(caught.value, "__notes__", [])
        assert any(box.id in note for note in notes if isinstance(note, str))
        assert box.id in emulator.live_sandboxes()
    finally:
        emulator.faults.clear()
        client.destroy(box.id or "")


def test_cleanup_failure_under_a_failing_command_keeps_the_command_error(
    emulator: Emulator, instant: Client
) -> None:
    client = instant
    box = client.lease()
    try:
        with pytest.raises(cs.CommandFailed) as caught, box:
            emulator.faults.add(Fault("sandbox.delete", status=500, times=10))
            box.run("exit 7", check=True)

        assert caught.value.result.exit_code == 7
        assert cs.is_cleanup_error(caught.value)
    finally:
        emulator.faults.clear()
        client.destroy(box.id or "")


# --- rate limits and slow answers ------------------------------------------


def test_429_with_retry_after_is_waited_out_and_retried(
    emulator: Emulator, managed_path: None
) -> None:
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    with emulator.client(requests_per_minute=FAST, sleep=sleep) as client, client.lease() as box:
        emulator.clear_request_log()
        waits.clear()
        emulator.faults.add(Fault("process.create", status=429, retry_after=1))

        result = box.run("echo created once")

        assert result.stdout == "created once\n"
        assert waits == [1.0]
        assert operations(emulator) == [
            ("process.create", 429),  # refused before it had any effect: safe to resend
            ("process.create", 200),
            ("process.connect", 200),
            ("process.stdin_close", 200),
        ]


def test_answer_delayed_past_the_deadline_raises_and_leaks_nothing(
    emulator: Emulator, client: Client
) -> None:
    before = set(emulator.live_sandboxes())
    emulator.clear_request_log()
    # The sandbox is created at once; only its answer comes too late.
    emulator.faults.add(Fault("sandbox.create", delay=2))

    with pytest.raises(cs.CreateosApiError) as caught:
        client.lease(name="too-slow", timeout=1).open()

    assert caught.value.status is None
    assert caught.value.operation == "sandbox creation"
    assert "too-slow-" in str(caught.value)  # says what is known: none by that name is left
    assert set(emulator.live_sandboxes()) == before
    # The late answer is logged once it is finally sent.
    wait_until(lambda: ("sandbox.create", 200) in operations(emulator), what="the late answer")
    assert sorted(operations(emulator)) == [
        ("sandbox.create", 200),
        ("sandbox.delete", 200),  # found by its name and destroyed
        ("sandbox.list", 200),
    ]
    assert set(emulator.live_sandboxes()) == before


# --- a stream that keeps dropping: the exit status recovered with wait ----------------------


def _napping(seconds: float) -> None:
    time.sleep(min(seconds, 0.02))  # reconnection backoff, without the real wait


def test_a_stream_that_keeps_dropping_still_yields_the_exit_code(
    emulator: Emulator, managed_path: None
) -> None:
    with (
        emulator.client(requests_per_minute=FAST, sleep=_napping) as client,
        client.lease() as box,
    ):
        emulator.clear_request_log()
        # Every connection is cut before its first frame (the exit frame, here): the
        # reconnection budget is spent, then the long poll learns how the command ended.
        emulator.faults.add(Fault("process.connect", drop_after_frames=0, times=1000))
        result = box.run("sleep 0.3; exit 3", timeout=30)
        emulator.faults.clear()
        assert (result.exit_code, result.timed_out, result.stdout) == (3, False, "")
        seen = operations(emulator)
        assert seen.count(("process.connect", 200)) == 6
        assert ("process.wait", 200) in seen
        assert ("process.delete", 200) not in seen  # it has exited: nothing to terminate


def test_output_that_kept_dropping_is_reported_lost_with_the_exit_code(
    emulator: Emulator, managed_path: None
) -> None:
    with (
        emulator.client(requests_per_minute=FAST, sleep=_napping) as client,
        client.lease() as box,
    ):
        emulator.faults.add(Fault("process.connect", drop_after_frames=0, times=1000))
        with pytest.raises(cs.OutputLostError) as caught:
            box.run("echo never seen; exit 4", timeout=30)
        emulator.faults.clear()
        error = caught.value
        assert error.lost_through == 1 and "lost 1 output frame (1 to 1)" in str(error)
        assert error.result is not None and error.result.exit_code == 4
        assert error.result.stdout == ""


# --- eviction is by size alone: replay across many drops ---------------------------------


def test_50_mb_with_the_stream_dropped_every_7_frames_arrives_byte_exact(
    emulator: Emulator,
) -> None:
    count = 6_700_000  # `seq 1 N`: about 50 MB, every line different
    expected = hashlib.sha256("".join(f"{i}\n" for i in range(1, count + 1)).encode())
    hasher = StreamHasher()
    with client_for(emulator) as client, client.lease() as box:
        emulator.clear_request_log()
        emulator.faults.add(Fault("process.connect", drop_after_frames=7, times=100_000))
        result = box.run(["seq", "1", str(count)], on_output=hasher, max_output=0, timeout=300)
        emulator.faults.clear()
        assert result.ok and result.truncated
        assert hasher.chars["stdout"] > 50_000_000
        assert hasher.digest("stdout") == expected.hexdigest()
        connects = operations(emulator).count(("process.connect", 200))
        assert connects > 100  # the stream really was dropped all along


def client_for(emulator: Emulator) -> Client:
    return emulator.client(requests_per_minute=FAST, sleep=_napping)
