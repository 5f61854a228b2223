"""Every retry and poll loop of the package: one place, one policy, built on tenacity.

Which failures may be retried follows PROTOCOL.md and the official SDKs:

- 429 and 503 always, creations included (the service says it did not
  process the request: rate limited, or no host with capacity right now);
- a connection that was never established, always (nothing was sent);
- 500/502/504 and a lost answer only for requests that are safe to repeat.
  Creations (sandbox, process) are never repeated after those: the first one
  may have taken effect, and there is no idempotency key.
- 408 never: it is the long poll's "not yet", and its caller decides.

No wait ever runs past the operation's deadline: when the next sleep would
cross it, the last error is raised instead.

The first attempt runs without tenacity: almost every call succeeds at once,
and tenacity (0.6 MiB of memory; 4.5 MiB where tornado is installed, which it
then imports, and asyncio with it) is imported only when a first attempt fails
and may be retried. It then takes over as if it had made that attempt itself
(``_replaying``): the same waits, attempt counts and stops.
"""

from __future__ import annotations

import enum
import random
import time
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from ..errors import CreateosApiError, OperationTimeout
from .deadline import Deadline

if TYPE_CHECKING:
    import tenacity

T = TypeVar("T")
Sleep = Callable[[float], None]
Stop = Callable[["tenacity.RetryCallState"], bool]

REFUSED_STATUSES = frozenset({429, 503})  # not processed: safe to send again, whatever it does
UNKNOWN_OUTCOME_STATUSES = frozenset({500, 502, 504})  # may have taken effect
BACKOFF_FIRST = 0.25
BACKOFF_MAX = 8.0
POLL_FIRST = 0.05
POLL_MAX = 2.0


class Repeat(enum.Enum):
    """How safe it is to send a request again after a failure."""

    SAFE = "safe"  # idempotent: GET, PUT of a replayable body, DELETE
    REFUSED_ONLY = "refused_only"  # creations and other one-shot effects: 429, 503, unsent
    NEVER = "never"  # a body that cannot be replayed: no retry at all


def should_retry(exc: BaseException, repeat: Repeat) -> bool:
    """Decide whether a failed request may be sent again."""
    if repeat is Repeat.NEVER or not isinstance(exc, CreateosApiError):
        return False
    if exc.status in REFUSED_STATUSES:
        return True
    if exc.status is None and not exc.outcome_unknown:
        return True  # the connection was never made: nothing reached the service
    if repeat is Repeat.SAFE:
        return exc.status is None or exc.status in UNKNOWN_OUTCOME_STATUSES
    return False


def _backoff(state: tenacity.RetryCallState) -> float:
    """Retry-After when the service gave one, else capped exponential backoff with jitter."""
    exc = state.outcome.exception() if state.outcome is not None else None
    if isinstance(exc, CreateosApiError) and exc.retry_after is not None:
        return exc.retry_after
    ceiling = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (state.attempt_number - 1))
    return random.uniform(ceiling / 2, ceiling)


class _Past:
    """Stop when the next sleep would reach past the deadline."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline

    def __call__(self, state: tenacity.RetryCallState) -> bool:
        return state.upcoming_sleep >= self.deadline.remaining()


class _Exhausted:
    """Stop after ``budget.limit`` failures in a row without progress."""

    def __init__(self, budget: ReconnectBudget) -> None:
        self.budget = budget

    def __call__(self, state: tenacity.RetryCallState) -> bool:
        self.budget.failures += 1
        return self.budget.failures > self.budget.limit


def _either(*stops: Callable[[tenacity.RetryCallState], bool]) -> Stop:
    """Stop when one of ``stops`` says so (asked in order, until one does)."""
    return lambda state: any(stop(state) for stop in stops)


def call(
    attempt: Callable[[], T],
    *,
    repeat: Repeat,
    max_retries: int,
    deadline: Deadline,
    sleep: Sleep = time.sleep,
) -> T:
    """Run ``attempt`` and retry it as ``repeat`` allows; re-raise the last error."""
    try:
        return attempt()
    except Exception as exc:
        if not should_retry(exc, repeat):
            raise
        first = _replaying(attempt, error=exc)
    import tenacity

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(lambda exc: should_retry(exc, repeat)),
        wait=_backoff,
        stop=_either(tenacity.stop_after_attempt(max_retries + 1), _Past(deadline)),
        sleep=sleep,
        reraise=True,
    )
    return _run(retrying, first)


def poll(
    read: Callable[[], T],
    done: Callable[[T], bool],
    *,
    deadline: Deadline,
    operation: str,
    sleep: Sleep = time.sleep,
    first: float = POLL_FIRST,
    maximum: float = POLL_MAX,
) -> T:
    """Call ``read`` until ``done`` accepts its result: fast at first, then backing off.

    Errors raised by ``read`` propagate at once (``read`` retries on its own).
    Raises OperationTimeout when the deadline comes first.
    """

    result = read()
    if done(result):
        return result
    import tenacity

    def timed_out(state: tenacity.RetryCallState) -> T:
        raise OperationTimeout(operation, deadline.seconds)

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_not_result(done),
        wait=tenacity.wait_exponential(multiplier=first, max=maximum),
        stop=_Past(deadline),
        sleep=sleep,
        retry_error_callback=timed_out,
    )
    return _run(retrying, _replaying(read, result=result))


class ReconnectBudget:
    """Bounds reconnections of an output stream: N in a row without progress.

    A stream that delivers frames between drops may reconnect indefinitely
    (within its deadline); one that keeps dropping without delivering
    anything gives up after ``limit`` attempts.
    """

    def __init__(self, limit: int = 5) -> None:
        self.limit = limit
        self.failures = 0

    def progressed(self) -> None:
        """The stream delivered something: the next drop starts a fresh count."""
        self.failures = 0

    def _pause(self) -> float:
        # The first reconnection after progress is immediate: a single drop is normal.
        if self.failures == 0:
            return 0.0
        return float(min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (self.failures - 1)))

    def call(
        self,
        attempt: Callable[[], T],
        retry_on: Callable[[BaseException], bool],
        *,
        deadline: Deadline,
        sleep: Sleep = time.sleep,
    ) -> T:
        """Run ``attempt``, reconnecting after failures that ``retry_on`` accepts."""
        try:
            return attempt()
        except Exception as exc:
            if not retry_on(exc):
                raise
            first = _replaying(attempt, error=exc)
        import tenacity

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(retry_on),
            wait=lambda state: self._pause(),
            stop=_either(_Exhausted(self), _Past(deadline)),
            sleep=sleep,
            reraise=True,
        )
        return _run(retrying, first)


def _replaying(
    attempt: Callable[[], T], *, result: T | None = None, error: Exception | None = None
) -> Callable[[], T]:
    """``attempt``, whose first call gives the outcome of the attempt already made (its
    ``result``, or its ``error`` raised again) so that tenacity counts it and waits after it."""
    pending = True

    def replay() -> T:
        nonlocal pending
        if not pending:
            return attempt()
        pending = False
        if error is not None:
            raise error
        return result  # type: ignore[return-value]

    return replay


# The machinery a retried call's error passes through on its way out: its frames say
# nothing to the caller (a rejected key printed 63 lines, most of them these).
_MACHINERY = ("tenacity", "concurrent.futures")


def _run(retrying: tenacity.Retrying, attempt: Callable[[], T]) -> T:
    """``retrying(attempt)``; an error leaves without the retry machinery's frames."""
    try:
        return retrying(attempt)
    except BaseException as exc:
        exc.__traceback__ = _without_machinery(exc.__traceback__)
        raise


def _without_machinery(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` without the frames of tenacity and concurrent.futures (a new chain)."""
    frames = []
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        if not module.startswith(_MACHINERY):
            frames.append(tb)
        tb = tb.tb_next
    kept = None
    for frame in reversed(frames):
        kept = types.TracebackType(kept, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
    return kept
