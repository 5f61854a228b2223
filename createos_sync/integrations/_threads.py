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
from typing import TypeVar

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
    timeout: float | None,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    stdin: bytes | str = b"",
    max_output: int = 4 * 1024 * 1024,
) -> cs.RunResult[str]:
    """Run a command to its end; cancellation terminates its process tree.

    Started as a background process (shielded: its handle must not be lost
    to a cancellation while it starts), then waited for in a worker thread.
    On a timeout the tree is terminated and ``TimeoutError`` raised, with
    the output so far in its ``truncated_output`` (Inspect reads it there).
    Request budget: 4 (stdin staged, create, output stream, start gate), 5
    with a termination.
    """
    process = await shielded(
        lease.start, argv, cwd=cwd, env=env, stdin=stdin, max_output=max_output
    )
    try:
        return await call(process.wait, timeout)
    except cs.OperationTimeout:
        await shielded(process.terminate)
        result = await shielded(process.wait)
        error = TimeoutError(f"Command timed out after {timeout} seconds")
        error.truncated_output = result.stdout + result.stderr  # type: ignore[attr-defined]
        raise error from None
    except BaseException:
        await shielded(process.terminate)
        raise


def returncode(result: cs.RunResult[str]) -> int:
    """The shell's way: the exit code, or 128 + N for a process killed by signal N."""
    if result.exit_code is not None:
        return result.exit_code
    return 128 + signal.Signals[result.signal].value if result.signal else 1
