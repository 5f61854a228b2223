"""The error hierarchy of ``createos_sync``.

::

    CreateosError
    ├── ConfigError (also ValueError)     bad configuration, found before any request
    ├── CreateosApiError                  an HTTP answer (or a lost one) that is a failure:
    │   │                                 .status, .operation, .request_id, .server_message
    │   └── RemoteFileNotFoundError (also FileNotFoundError)   no such file in the sandbox
    ├── OperationTimeout (also TimeoutError)   an operation outlived its deadline
    ├── SandboxUnavailable                the sandbox is in a state that cannot serve
    │   └── LeaseExpired                  its ttl watchdog deleted it (renewals stopped)
    ├── LeaseClosed (also RuntimeError)   the lease is not open (closed, expired, never opened)
    ├── TemplateBuildError                a template build failed: .template_id, log tail
    ├── ProtocolError                     malformed envelope / frame / sequence
    │   └── OutputLostError               output could not be read: .lost_through, .result
    ├── CreateosCleanupError              containment unconfirmed: .sandbox_id,
    │                                     .process_ids, .sandbox_destroyed
    ├── UnsafeArchiveError (also ValueError)   a downloaded tar refused before extraction
    └── CommandFailed                     .result (``check=True``)
        └── CommandTimeout (also TimeoutError)

Messages are built from fixed operation labels, HTTP statuses and ids only:
never from a raw response body, a query string, a header or the API key,
because CreateOS error bodies may echo the request, secrets included. The one
piece of server text shown is the ``message`` of a 4xx answer, once scrubbed
of the key and of every value the request sent (``_wire.server_text.scrub``).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .result import RunResult


class Operation:
    """Fixed labels naming what was being done when an error happened."""

    CATALOG = "catalog lookup"
    SANDBOX_CREATION = "sandbox creation"
    SANDBOX_LIFECYCLE = "sandbox lifecycle"
    SANDBOX_LISTING = "sandbox listing"
    SANDBOX_CLEANUP = "sandbox cleanup"
    SANDBOX_SETTINGS = "sandbox settings"
    PROCESS_CREATION = "process creation"
    PROCESS_CONTROL = "process control"
    PROCESS_CLEANUP = "process cleanup"
    OUTPUT_CONNECTION = "output connection"
    FILE_TRANSFER = "file transfer"
    EXEC = "housekeeping exec"
    SANDBOX_FORK = "sandbox fork"
    TEMPLATE_BUILD = "template build"
    TEMPLATE_LOG = "template build log"
    TEMPLATE_MANAGEMENT = "template management"
    PORT_WAIT = "port wait"
    TTL = "ttl watchdog"
    COMPUTER = "computer use"
    REQUEST = "API request"
    DISK_MANAGEMENT = "disk management"
    NETWORK_MANAGEMENT = "network management"
    ACCESS_TOKEN = "access token management"


class CreateosError(Exception):
    """Base class of every error this package raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle rebuilds an exception as ``cls(*args)``, which the subclasses' own
        # signatures refuse; rebuild from args and attributes instead, so that an error
        # raised in another process (``cs.map`` on a process pool or a Dask cluster)
        # comes back whole: its class, fields, notes and attached cleanup failures.
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[CreateosError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class ConfigError(CreateosError, ValueError):
    """Invalid configuration, detected before any request was sent."""


class CreateosApiError(CreateosError):
    """The service answered with a failure, or the answer was lost.

    ``status`` is the HTTP status, or ``None`` when no answer arrived (a
    connection error or a timeout). ``outcome_unknown`` is true when the
    request may have taken effect although it failed (a creation whose reply
    was lost). ``server_message`` is the service's own explanation of a 4xx
    ("unknown shape"), scrubbed of the API key and of every value the request
    sent, at most about 200 printable characters; None for a 5xx or no answer.
    """

    def __init__(
        self,
        operation: str,
        status: int | None,
        *,
        request_id: str | None = None,
        detail: str | None = None,
        outcome_unknown: bool = False,
        retry_after: float | None = None,
        server_message: str | None = None,
    ) -> None:
        self.operation = operation
        self.status = status
        self.request_id = request_id
        self.outcome_unknown = outcome_unknown
        self.retry_after = retry_after
        self.server_message = server_message
        what = f"HTTP {status}" if status is not None else "no answer"
        message = f"{what} during {operation}"
        if request_id:
            message += f" (request id {request_id})"
        if detail:
            message += f": {detail}"
        super().__init__(message)


class RemoteFileNotFoundError(CreateosApiError, FileNotFoundError):
    """The sandbox has no file (or directory) at ``filename``, the remote path asked for.

    Raised by reads, downloads and directory downloads, so that ``except
    FileNotFoundError`` works as it does for a local file. It is an API
    error with status 404 (the service's answer to a missing file), or, for a
    directory download, the sandbox's own report that the path does not exist.
    """

    def __init__(
        self,
        filename: str,
        operation: str = Operation.FILE_TRANSFER,
        request_id: str | None = None,
    ) -> None:
        super().__init__(
            operation,
            404,
            request_id=request_id,
            detail=f"no such file or directory in the sandbox: {filename}",
        )
        self.errno = errno.ENOENT
        self.strerror = os.strerror(errno.ENOENT)
        self.filename = filename

    def __str__(self) -> str:  # the API error's message, not OSError's "[Errno 2] ..."
        return str(self.args[0])

    def __reduce__(self) -> tuple[Any, ...]:
        # OSError keeps errno and filename outside __dict__: rebuild through __init__.
        return (type(self), (self.filename, self.operation, self.request_id), self.__dict__)


class OperationTimeout(CreateosError, TimeoutError):
    """An operation did not finish within its deadline."""

    def __init__(self, operation: str, seconds: float, detail: str | None = None) -> None:
        self.operation = operation
        self.seconds = seconds
        message = f"{operation} did not finish within {seconds:g} s"
        if detail:
            message += f": {detail}"
        super().__init__(message)


class SandboxUnavailable(CreateosError):
    """The sandbox reached a state in which it cannot serve (failed, destroyed...)."""

    def __init__(self, sandbox_id: str, status: str, detail: str | None = None) -> None:
        self.sandbox_id = sandbox_id
        self.status = status
        message = f"sandbox {sandbox_id} is {status}"
        if detail:
            message += f": {detail}"
        super().__init__(message)


class LeaseExpired(SandboxUnavailable):
    """The lease's ttl watchdog deleted its sandbox: no renewal reached it for ``ttl`` seconds.

    This happens when the program was frozen (SIGSTOP, a laptop asleep) or
    cut off from the service for longer than the ttl. Nothing is left to
    clean up: the lease's ``close()`` is quiet.
    """

    def __init__(self, sandbox_id: str, ttl: float) -> None:
        self.ttl = ttl
        super().__init__(
            sandbox_id,
            "destroyed",
            f"its ttl watchdog deleted it after {ttl:g} s without renewal "
            "(the program was frozen, or cut off from the service, for that long)",
        )


class LeaseClosed(CreateosError, RuntimeError):
    """The lease is not open: never opened, already closed, or expired."""


class TemplateBuildError(CreateosError):
    """A template build ended ``failed``; the message ends with the last lines of its log.

    ``template_id`` names the failed template (it still exists: delete it
    with ``client.delete_template``); ``log_tail`` holds those last lines,
    control characters removed and each line bounded.
    """

    def __init__(self, template_id: str, name: str, log_tail: Sequence[str]) -> None:
        self.template_id = template_id
        self.log_tail = tuple(log_tail)
        message = f"template {name!r} ({template_id}) failed to build"
        if self.log_tail:
            message += "; the end of its build log:\n" + "\n".join(
                f"  | {line}" for line in self.log_tail
            )
        else:
            message += " (its build log is empty)"
        super().__init__(message)


class ProtocolError(CreateosError):
    """The service answered something the protocol does not allow."""


class OutputLostError(ProtocolError):
    """Output could not be read: evicted from the process's journal, or unreachable.

    ``lost_through`` is the sequence number of the last output frame that
    cannot be read (None when the service did not say). ``result`` is the
    ``RunResult`` when the command's end is known all the same (its exit
    status recovered after the stream kept dropping): its output is what was
    read before the loss.
    """

    def __init__(
        self, message: str, *, lost_through: int | None = None, result: RunResult[Any] | None = None
    ) -> None:
        self.lost_through = lost_through
        self.result = result
        super().__init__(message)


class CreateosCleanupError(CreateosError):
    """Containment could not be confirmed: something may still be running.

    ``sandbox_destroyed`` is ``True`` when the sandbox was destroyed as the
    last resort, ``False`` when that destroy failed too, and ``None`` when it
    was not attempted.
    """

    def __init__(
        self,
        message: str,
        *,
        sandbox_id: str | None,
        process_ids: Sequence[str] = (),
        sandbox_destroyed: bool | None = None,
    ) -> None:
        self.sandbox_id = sandbox_id
        self.process_ids = tuple(process_ids)
        self.sandbox_destroyed = sandbox_destroyed
        super().__init__(message)


class UnsafeArchiveError(CreateosError, ValueError):
    """A directory archive from the sandbox was refused, and nothing was extracted: an entry
    could reach outside its target (absolute name, ``..``, escaping link), is a device, or the
    archive is damaged."""


# What a failure's message shows of each output stream: its last lines, each shortened.
_TAIL_LINES = 5
_TAIL_LINE_CHARS = 200


def _stream_tail(name: str, output: str | bytes) -> str:
    """The last few non-blank lines of ``output`` under a label naming ``name``, indented,
    shortened and stripped of control characters (a terminal must not interpret them),
    or "" when there are none. Bytes (``text=False``) are shown decoded, invalid ones as
    U+FFFD."""
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else output
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    shown = []
    for line in lines[-_TAIL_LINES:]:
        clean = "".join(c if c.isprintable() else "?" for c in line.expandtabs(4))
        if len(clean) > _TAIL_LINE_CHARS:
            clean = clean[: _TAIL_LINE_CHARS - 3] + "..."
        shown.append(f"  {clean}")
    if not shown:
        return ""
    cut = len(lines) - len(shown)
    head = f"{name} (last {len(shown)} of {len(lines)} lines):" if cut else f"{name}:"
    return "\n".join([head, *shown])


def _output_tail(result: RunResult[Any]) -> str:
    """The tails of stdout and stderr, each labelled, for whichever has output: many
    tools (pytest, make) report their failures on stdout."""
    tails = [_stream_tail("stdout", result.stdout), _stream_tail("stderr", result.stderr)]
    return "\n".join(t for t in tails if t)


class CommandFailed(CreateosError):
    """A command run with ``check=True`` exited non-zero; ``.result`` has its output.

    The message ends with the last few lines of the command's stdout and of
    its stderr, each labelled and shown only when it has output (at most five
    lines each, each cut at 200 characters, control characters shown as
    ``?``), as ``subprocess`` users end up printing by hand; ``.result`` keeps all.
    """

    def __init__(self, result: RunResult[Any], message: str | None = None) -> None:
        self.result = result
        if message is None:
            if result.signal is not None:
                ended = f"was killed by {result.signal}"
            else:
                ended = f"exited with status {result.exit_code}"
            message = f"command {result.describe_args()} {ended} ({result.where()})"
            tail = _output_tail(result)
            if tail:
                message += "\n" + tail
        super().__init__(message)


class CommandTimeout(CommandFailed, TimeoutError):
    """A command outlived its timeout; its process tree was terminated."""

    def __init__(self, result: RunResult[Any], timeout: float | None = None) -> None:
        self.timeout = timeout
        limit = f" of {timeout:g} s" if timeout is not None else ""
        message = (
            f"command {result.describe_args()} timed out after its limit{limit} ({result.where()})"
        )
        tail = _output_tail(result)
        super().__init__(result, f"{message}\n{tail}" if tail else message)


class RunCancelled(CreateosError):
    """A ``run()`` was cancelled (``Cancel.set()``) before its command ended.

    The command's process tree was ended and confirmed first (an
    unconfirmed end poisons the lease, as for a timeout); ``.result`` has
    the output read until then, with ``timed_out=True``.
    """

    def __init__(self, result: RunResult[Any]) -> None:
        self.result = result
        super().__init__(
            f"command {result.describe_args()} was cancelled: its processes were ended "
            f"({result.where()})"
        )


def restated(exc: BaseException, detail: str, *, outcome_unknown: bool = False) -> BaseException:
    """``exc`` said again with what is now known about its outcome.

    An API error keeps its status, operation and request id with ``detail``
    as its explanation; a protocol error gets ``detail`` appended; any other
    exception is returned as it is (the caller may note ``detail`` on it).
    """
    if isinstance(exc, CreateosApiError):
        return CreateosApiError(
            exc.operation,
            exc.status,
            request_id=exc.request_id,
            outcome_unknown=outcome_unknown,
            detail=detail,
        )
    if isinstance(exc, ProtocolError):
        return ProtocolError(f"{exc}; {detail}")
    return exc


def may_have_taken_effect(exc: BaseException) -> bool:
    """Whether a failed request might still have done its work on the service.

    A definite refusal (a 4xx, a connection never made, a deadline that ran
    out before sending) did nothing; a 5xx to a creation, a lost answer, a
    malformed success or an interruption mid-request leaves it unknown.
    """
    if isinstance(exc, CreateosApiError):
        return exc.outcome_unknown
    return not isinstance(exc, (OperationTimeout, ConfigError, ValueError, TypeError))


_NOTE_PREFIX = "CreateosCleanupError: "


def missing_extra(extra: str, module: str, exc: ModuleNotFoundError) -> ModuleNotFoundError:
    """The one-line error for an optional extra that is not installed, as sentry-sdk's
    integrations say it: what needs what, and the pip line that installs it.

    ``name`` stays the missing module's, so that ``except ModuleNotFoundError``
    and checks of ``exc.name`` behave as for the original error.
    """
    missing = (exc.name or "a dependency").split(".")[0]
    return ModuleNotFoundError(
        f"{module} needs {missing}, which is not installed: pip install 'createos-sync[{extra}]'",
        name=exc.name,
    )


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``, also on Python 3.10 (where only ``__notes__`` exists)."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    else:
        exc.__dict__["__notes__"] = [*getattr(exc, "__notes__", ()), note]


def attach_cleanup_failure(exc: BaseException, failure: CreateosCleanupError) -> None:
    """Attach a cleanup failure to an exception that is already propagating."""
    add_note(exc, _NOTE_PREFIX + str(failure))
    exc.__dict__.setdefault("_createos_cleanup_errors", []).append(failure)


def is_cleanup_error(exc: BaseException | None) -> bool:
    """True if ``exc`` is, was caused by, or carries a ``CreateosCleanupError``."""
    pending = [exc]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, CreateosCleanupError):
            return True
        if current.__dict__.get("_createos_cleanup_errors"):
            return True
        notes = getattr(current, "__notes__", ())
        if any(isinstance(n, str) and n.startswith(_NOTE_PREFIX) for n in notes):
            return True
        pending += [current.__cause__, current.__context__]
    return False
