"""The SDK from an event loop: blocking calls in worker threads, leases closed on cancellation.

The SDK is synchronous. An adapter runs each call in a worker thread, at most
``THREADS`` at a time per event loop, so that a hundred samples never block
the loop nor start a thousand threads. Cancellation is where adapters leak
(a sample cancelled during its setup): ``opened()`` closes the lease when the
caller is cancelled at any point of the opening, even though the worker
thread that opens it cannot be interrupted and is abandoned; ``close()`` wins
over an ``open()`` in progress (``Lease.close``), so nothing is left once it
returns. The closing itself runs shielded from cancellation: it must finish.
"""

from __future__ import annotations

import functools
import logging
import signal
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread

import createos_sync as cs
from createos_sync.errors import CreateosCleanupError, add_note, attach_cleanup_failure

T = TypeVar("T")
log = logging.getLogger("createos_sync.integrations")

# Worker threads per event loop: a call that follows a command's output holds
# one for the command's whole life, so this bounds concurrent commands too.
THREADS = 64
_limiter: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = anyio.lowlevel.RunVar("createos_limiter")
_client_lock = threading.Lock()
_client: cs.Client | None = None


def limiter() -> anyio.CapacityLimiter:
    """This event loop's bound on worker threads."""
    try:
        return _limiter.get()
    except LookupError:
        made = anyio.CapacityLimiter(THREADS)
        _limiter.set(made)
        return made


def shared_client() -> cs.Client:
    """One client per process (from ``CREATEOS_API_KEY`` / ``CREATEOS_API_URL``).

    Its request budget is the machine's anyway (shared through the state
    directory); one client also shares one connection pool between samples.
    """
    global _client
    with _client_lock:
        if _client is None:
            _client = cs.Client()
        return _client


def use_client(client: cs.Client | None) -> None:
    """Make ``client`` the adapters' client (None: build one from the environment again).

    For programs and tests that configure a client in code rather than
    through ``CREATEOS_API_KEY`` / ``CREATEOS_API_URL``.
    """
    global _client
    with _client_lock:
        _client = client


async def call(fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """``fn(*args, **kwargs)`` in a worker thread; cancellation abandons the thread."""
    bound = functools.partial(fn, *args, **kwargs)
    return await anyio.to_thread.run_sync(bound, abandon_on_cancel=True, limiter=limiter())


async def shielded(fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """``fn(*args, **kwargs)`` in a worker thread, to its end whatever cancels the caller."""
    bound = functools.partial(fn, *args, **kwargs)
    with anyio.CancelScope(shield=True):
        # Not through the limiter: a cleanup must never queue behind the calls it ends.
        result = await anyio.to_thread.run_sync(bound)
    return result


async def opened(lease: cs.Lease) -> cs.Lease:
    """``lease.open()`` from the event loop; on any failure or cancellation, closed again."""
    try:
        return await call(lease.open)
    except BaseException as exc:
        await close(lease, exc)
        raise


async def close(lease: cs.Lease, cause: BaseException | None = None) -> None:
    """Close ``lease`` shielded from cancellation.

    With ``cause`` (the exception already propagating) a cleanup failure is
    attached to it as a note and logged; without, it is raised: never silent.
    """
    try:
        await shielded(lease.close)
    except BaseException as exc:
        if cause is None:
            raise
        if isinstance(exc, CreateosCleanupError):
            attach_cleanup_failure(cause, exc)  # Lease.close has logged it
        else:
            log.error("closing the lease of sandbox %s failed: %s", lease.id, exc)
            add_note(cause, f"closing the lease of sandbox {lease.id} failed too: {exc!r}")


async def run(
    lease: cs.Lease,
    argv: list[str] | str,
    *,
    timeout: float,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    stdin: bytes | str = b"",
    max_output: int = 4 * 1024 * 1024,
) -> cs.RunResult[str]:
    """Run a command to its end; cancellation terminates its process tree.

    ``lease.run`` in a worker thread, given a ``cs.Cancel``: when the caller
    is cancelled, the token is set, which cuts the run's output stream at
    once; the worker ends the command's whole tree and confirms it (else
    the lease is poisoned), and the cancellation propagates once it has,
    with any cleanup failure attached (never silent). On a timeout,
    ``TimeoutError`` is raised with the output so far in its
    ``truncated_output`` (Inspect reads it there). Request budget: 1 in
    steady state (stdin inline), 3 for the lease's first command, 2 more
    to end a command on a timeout or a cancellation; a command while another
    runs in the session takes a managed process (3, 4 with stdin).
    """
    cancel = cs.Cancel()

    def command() -> cs.RunResult[str]:
        return lease.run(
            argv, cwd=cwd, env=env, stdin=stdin or None, timeout=timeout,
            max_output=max_output, cancel=cancel,
        )  # fmt: skip

    job = _Job(command)
    try:
        result = await call(job)
    except anyio.get_cancelled_exc_class() as cancelled:
        cancel.set()
        if job.abandon():  # it runs: the command's end is confirmed before cancelling
            failure = await shielded(job.outcome)
            if failure is not None:
                _attach(cancelled, failure, lease)
        raise
    if result.timed_out:
        error = TimeoutError(f"Command timed out after {timeout} seconds")
        error.truncated_output = result.stdout + result.stderr  # type: ignore[attr-defined]
        raise error
    return result


class _Job(Generic[T]):
    """A call for a worker thread that a cancelled caller may have to wait for.

    A cancellation abandons the thread (``call``), which may not even have
    started yet: ``abandon`` says whether it did (it then runs to its end,
    and ``outcome`` waits for that), or makes sure it never will.
    """

    def __init__(self, fn: Callable[[], T]) -> None:
        self._fn = fn
        self._lock = threading.Lock()
        self._state = "queued"  # then "running" or "abandoned"
        self._ended = threading.Event()
        self._error: BaseException | None = None

    def __call__(self) -> T:
        with self._lock:
            if self._state == "abandoned":
                raise _Abandoned()  # its caller is gone: nobody reads this
            self._state = "running"
        try:
            return self._fn()
        except BaseException as exc:
            self._error = exc
            raise
        finally:
            self._ended.set()

    def abandon(self) -> bool:
        """True if it is running (or ran): it then goes on to its end."""
        with self._lock:
            if self._state == "queued":
                self._state = "abandoned"
            return self._state == "running"

    def outcome(self) -> BaseException | None:
        """Wait for its end: what it raised that is more than the expected cancellation."""
        self._ended.wait()
        return None if isinstance(self._error, cs.RunCancelled) else self._error


class _Abandoned(Exception):
    """A job whose caller was cancelled before it started: it never runs."""


def _attach(cancelled: BaseException, failure: BaseException, lease: cs.Lease) -> None:
    """What went wrong while ending a cancelled command: logged, and on the cancellation."""
    log.error("ending the cancelled command in sandbox %s failed: %s", lease.id, failure)
    if isinstance(failure, CreateosCleanupError):
        attach_cleanup_failure(cancelled, failure)
    else:
        add_note(cancelled, f"ending the cancelled command in {lease.id} failed: {failure!r}")


def returncode(result: cs.RunResult[str]) -> int:
    """The shell's way: the exit code, or 128 + N for a process killed by signal N."""
    if result.exit_code is not None:
        return result.exit_code
    return 128 + signal.Signals[result.signal].value if result.signal else 1
