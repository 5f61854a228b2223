"""``_wire.retry``: the first attempt runs without tenacity, which takes over after a
retryable failure exactly as if it had made that attempt (same waits, counts, stops)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from createos_sync import CreateosApiError, OperationTimeout
from createos_sync._wire import retry
from createos_sync._wire.deadline import Deadline


def failing(statuses: list[int | None], result: str = "ok") -> tuple[list[int], object]:
    calls: list[int] = []

    def attempt() -> str:
        calls.append(len(calls) + 1)
        if len(calls) <= len(statuses):
            raise CreateosApiError("sandbox.get", statuses[len(calls) - 1])
        return result

    return calls, attempt


def test_two_refusals_then_success_waits_twice_with_backoff() -> None:
    calls, attempt = failing([503, 429])
    slept: list[float] = []
    got = retry.call(
        attempt,  # type: ignore[arg-type]
        repeat=retry.Repeat.REFUSED_ONLY,
        max_retries=3,
        deadline=Deadline.after(60),
        sleep=slept.append,
    )
    assert got == "ok" and calls == [1, 2, 3]
    first, second = slept  # attempt 1's wait: 0.125-0.25 s; attempt 2's: 0.25-0.5 s
    assert retry.BACKOFF_FIRST / 2 <= first <= retry.BACKOFF_FIRST
    assert retry.BACKOFF_FIRST <= second <= 2 * retry.BACKOFF_FIRST


def test_retries_stop_after_max_retries_counting_the_first_attempt() -> None:
    calls, attempt = failing([503] * 10)
    with pytest.raises(CreateosApiError) as raised:
        retry.call(
            attempt,  # type: ignore[arg-type]
            repeat=retry.Repeat.SAFE,
            max_retries=2,
            deadline=Deadline.after(60),
            sleep=lambda s: None,
        )
    assert raised.value.status == 503 and calls == [1, 2, 3]


def test_an_error_not_to_retry_is_raised_at_once() -> None:
    calls, attempt = failing([500])  # a creation may have taken effect: never repeated
    with pytest.raises(CreateosApiError) as raised:
        retry.call(
            attempt,  # type: ignore[arg-type]
            repeat=retry.Repeat.REFUSED_ONLY,
            max_retries=5,
            deadline=Deadline.after(60),
            sleep=lambda s: pytest.fail("no wait"),
        )
    assert raised.value.status == 500 and calls == [1]


def test_poll_reads_until_done_and_times_out_at_the_deadline() -> None:
    reads = iter(["creating", "creating", "running"])
    slept: list[float] = []
    got = retry.poll(
        lambda: next(reads),
        lambda status: status == "running",
        deadline=Deadline.after(60),
        operation="sandbox.get",
        sleep=slept.append,
    )
    assert got == "running" and len(slept) == 2
    with pytest.raises(OperationTimeout):
        retry.poll(
            lambda: "creating",
            lambda status: status == "running",
            deadline=Deadline.after(0.01),
            operation="sandbox.get",
            sleep=lambda s: None,
        )


def test_reconnect_budget_counts_the_first_failure() -> None:
    calls, attempt = failing([None] * 10)
    budget = retry.ReconnectBudget(limit=2)
    with pytest.raises(CreateosApiError):
        budget.call(
            attempt,  # type: ignore[arg-type]
            lambda exc: True,
            deadline=Deadline.after(60),
            sleep=lambda s: None,
        )
    assert calls == [1, 2, 3]  # the first attempt and two reconnections


def test_tenacity_is_not_imported_while_every_first_attempt_succeeds() -> None:
    probe = (
        "import sys\n"
        "from createos_sync._wire import retry\n"
        "from createos_sync._wire.deadline import Deadline\n"
        "d = Deadline.after(5)\n"
        "retry.call(lambda: 1, repeat=retry.Repeat.SAFE, max_retries=3, deadline=d)\n"
        "retry.poll(lambda: 1, lambda r: True, deadline=d, operation='x')\n"
        "retry.ReconnectBudget().call(lambda: 1, lambda e: True, deadline=d)\n"
        "print('tenacity' in sys.modules, 'asyncio' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]
