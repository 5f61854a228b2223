"""Hangs and wrong errors found when the SDK was attacked (issue 9, items 8 and 10).

- A trickling answer (one byte every half second): every read resets a
  socket's timeout, so only a wall-clock deadline ends it. A run's timeout,
  an operation's deadline and cleanup's deadline must each hold however the
  bytes trickle.
- A sandbox failing under a command: its streams end without an exit frame,
  and the next process creation is refused with 409. The caller must learn
  that the sandbox failed (``SandboxUnavailable`` naming it and its status),
  not a fake ``SIGKILL`` or an "HTTP 409".

Each scenario checks what is left on the emulator (nothing) and how long the
call took against its deadline; the figures are in RELIABILITY.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import createos_sync as cs
from createos_sync.emulator import Emulator, Fault

from ..integration.helpers import FAST
from .ledger import Ledger
from .support import KEY, Nap, check_no_leaks

TRICKLE = 0.5  # seconds between two bytes of the answer
DEADLINE = 2.0
# What a call may take beyond its deadline: the termination or destroy that follows it.
SLACK = 4.0


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator(rate_limit=None, api_key=KEY) as emulator:
        yield emulator


def _client(emu: Emulator, timeout: float = 30.0, cleanup_timeout: float = 60.0) -> cs.Client:
    return emu.client(
        requests_per_minute=FAST, sleep=Nap(), timeout=timeout, cleanup_timeout=cleanup_timeout
    )


def test_a_trickling_stream_does_not_outlive_the_run_timeout(emu: Emulator, ledger: Ledger) -> None:
    with _client(emu) as client, client.lease() as box:
        emu.faults.add(Fault("process.connect", trickle=TRICKLE))
        started = time.monotonic()
        result = box.run("echo begun; exec sleep 60", timeout=DEADLINE)
        took = time.monotonic() - started
    assert result.timed_out and result.exit_code is None
    assert DEADLINE <= took < DEADLINE + SLACK, took
    assert check_no_leaks(emu, set()) == []
    ledger.add(scenarios=1, runs=1, leases=1)


def test_a_trickling_answer_does_not_outlive_an_operations_deadline(
    emu: Emulator, ledger: Ledger
) -> None:
    with _client(emu, timeout=DEADLINE) as client:
        box = client.lease().open()
        emu.faults.add(Fault("sandbox.get", trickle=TRICKLE))
        started = time.monotonic()
        with pytest.raises(cs.CreateosApiError, match="no answer before the deadline") as cut:
            box.info()
        took = time.monotonic() - started
        box.close()
    assert cut.value.outcome_unknown  # what reference/errors.md promises of an answer cut in flight
    assert DEADLINE <= took < DEADLINE + SLACK, took
    assert check_no_leaks(emu, set()) == []
    ledger.add(scenarios=1, leases=1)


def test_a_trickling_answer_does_not_outlive_cleanups_deadline(
    emu: Emulator, ledger: Ledger
) -> None:
    with _client(emu, cleanup_timeout=DEADLINE) as client:
        box = client.lease().open()
        box.start("exec sleep 60")
        emu.faults.add(Fault("process.delete", trickle=TRICKLE, times=2))
        emu.faults.add(Fault("process.get", trickle=TRICKLE, times=1))
        started = time.monotonic()
        with pytest.raises(
            cs.CreateosCleanupError, match="containment unconfirmed: termination of process"
        ) as caught:
            box.close()  # no answer of the DELETEs nor of the read arrives whole: destroyed
        took = time.monotonic() - started
    assert caught.value.sandbox_destroyed is True
    assert took < 2 * DEADLINE + SLACK, took
    assert check_no_leaks(emu, set()) == []
    ledger.add(scenarios=1, leases=1)


@pytest.mark.parametrize("status", ["failed", "error"])
def test_a_sandbox_failing_mid_run_is_sandbox_unavailable(
    emu: Emulator, ledger: Ledger, status: str
) -> None:
    with _client(emu) as client, client.lease() as box:
        assert box.id is not None
        sandbox_id = box.id

        def fail_once_begun(stream: str, text: str) -> None:
            if "begun" in text:
                emu.fail_sandbox(sandbox_id, status)

        started = time.monotonic()
        with pytest.raises(cs.SandboxUnavailable, match="stopped serving while process") as during:
            box.run("echo begun; exec sleep 60", timeout=30, on_output=fail_once_begun)
        with pytest.raises(
            cs.SandboxUnavailable, match="it can no longer start processes"
        ) as after:
            box.run("true")  # the creation's 409 is explained, not shown as "HTTP 409"
        took = time.monotonic() - started
    for caught in (during.value, after.value):
        assert (caught.sandbox_id, caught.status) == (sandbox_id, status)
        assert str(caught).startswith(f"sandbox {sandbox_id} is {status}")
        assert "SIGKILL" not in str(caught) and "HTTP 409" not in str(caught)
    assert took < SLACK, took  # no spinning until a deadline
    assert check_no_leaks(emu, set()) == []
    ledger.add(scenarios=1, runs=2, leases=1)
