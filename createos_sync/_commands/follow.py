"""Following one process's output: sequence, replay, gaps, reconnection.

The one stream model of the package, serving ``Lease.run`` and background
processes alike. A connection may drop at any time without ending the
process: the follower reconnects to the same process with
``after=<last seq seen>`` and skips frames it already has, so output is
neither lost nor duplicated. A sequence gap or an evicted offset means the
journal dropped output before it was read: that is ``OutputLostError``
(saying how many frames, ``lost_through``), never a silent hole.

Two things may look like a dropped stream and are not (``Recovery``):

- a stream that keeps dropping, its reconnection budget spent: the command
  may well finish all the same. The follower recovers its exit status with
  the long poll ``wait`` instead of giving up; the output it could not read
  is then recorded in ``lost``, which the caller raises with the result
  (``raise_if_lost``): the exit code is known, the output is not complete,
  and the caller is told both.
- a sandbox that died under the command: its streams end without an exit
  frame, or reconnecting is refused (404, 409). The follower then reads the
  sandbox, and ``SandboxUnavailable`` names its status.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import attrs

from .._wire import retry as _retry
from .._wire.deadline import Deadline
from .._wire.http import Stream
from .._wire.ndjson import Data, Error, Exit, parse_frame, split_lines
from .._wire.retry import UNKNOWN_OUTCOME_STATUSES
from .._wire.server_text import ERROR_CODE, token
from ..errors import CreateosApiError, Operation, OperationTimeout, OutputLostError, ProtocolError

if TYPE_CHECKING:
    from typing import Any

    from ..cancel import Cancel
    from ..result import RunResult

log = logging.getLogger("createos_sync.follow")

Keep = Callable[[str, bytes], None]  # each frame's raw bytes, in order (``Output.write``)
OpenStream = Callable[[int, Deadline], Stream]

EVICTED = "output_offset_expired"
EVICTED_WHY = "the journal evicted them before they were read"
REFUSED_FOR_A_DEAD_SANDBOX = frozenset({404, 409})


@attrs.frozen
class Ended:
    """How a process ended, as its record says: the exit, and its last output frame."""

    exit: Exit
    newest_seq: int | None


class Recovery(Protocol):
    """What the follower may ask of the service besides the stream itself."""

    def wait_end(self, deadline: Deadline) -> Ended:
        """Long-poll until the process has ended; OperationTimeout at the deadline."""

    def oldest_seq(self, deadline: Deadline) -> int | None:
        """Where the process's output journal starts now (None if unknown)."""

    def check_sandbox(self, deadline: Deadline) -> None:
        """Raise SandboxUnavailable if the sandbox will not serve again."""


class _Expired(Exception):
    """The deadline passed while reading."""


class _ReleaseFailed(Exception):
    """The start-gate release failed: not a reason to reconnect."""


class Follower:
    """Reads a process's output journal from ``after + 1`` to its exit frame.

    ``keep(stream, data)`` receives each frame's raw bytes, in order, once
    (``Output.write``, which decodes at its edges when asked to).
    """

    def __init__(
        self,
        open_stream: OpenStream,
        keep: Keep | None,
        *,
        after: int = 0,
        sleep: _retry.Sleep = time.sleep,
        recovery: Recovery | None = None,
    ) -> None:
        self._open_stream = open_stream
        self._keep = keep
        self._sleep = sleep
        self._recovery = recovery
        self.last_seq = after
        self.exit: Exit | None = None
        self.lost: OutputLostError | None = None

    def follow(
        self,
        deadline: Deadline,
        on_attached: Callable[[], None] | None = None,
        cancel: Cancel | None = None,
    ) -> Exit | None:
        """Read to the exit frame and return it; None if the deadline (or ``cancel``,
        which cuts the stream as the deadline does) came first.

        ``on_attached`` runs once, as soon as the first connection is
        established (it releases the start gate; never once cancelled).
        """
        if self.exit is not None:
            return self.exit
        if cancel is not None and cancel.is_set():
            return None
        budget = _retry.ReconnectBudget()
        pending = [on_attached] if on_attached is not None else []

        def stopped() -> bool:
            return deadline.expired() or (cancel is not None and cancel.is_set())

        try:
            self.exit = budget.call(
                lambda: self._read_once(deadline, budget, pending, cancel),
                retry_on=lambda exc: _is_drop(exc) and not stopped(),
                deadline=deadline,
                sleep=self._sleep,
            )
        except (_Expired, OperationTimeout):
            return None
        except _ReleaseFailed as failure:
            raise failure.__cause__ or failure from None
        except CreateosApiError as exc:
            if exc.status is None and stopped():
                return None  # the read was cut because the deadline passed (or a cancel)
            # Never attached: the start gate is shut, the command cannot have run.
            if pending or not _is_drop(exc) or self._recovery is None:
                raise
            self.exit = self._recover(deadline)
            if self.exit is None:
                return None
        return self.exit

    def raise_if_lost(self, result: RunResult[Any]) -> None:
        """Raise the recorded loss (if any), carrying the result the command left."""
        if self.lost is not None:
            self.lost.result = result
            raise self.lost

    def _read_once(
        self,
        deadline: Deadline,
        budget: _retry.ReconnectBudget,
        pending: list[Callable[[], None]],
        cancel: Cancel | None,
    ) -> Exit:
        stream = self._connect(deadline)
        with stream, cancel.waking(stream.cut) if cancel else contextlib.nullcontext():
            if cancel is not None and cancel.is_set():
                raise _Expired()  # before the start gate opens: the command never runs
            while pending:
                release = pending.pop()
                try:
                    release()
                except Exception as exc:
                    raise _ReleaseFailed() from exc
            for line in split_lines(stream.chunks()):
                frame = parse_frame(line)
                if isinstance(frame, Data):
                    if frame.seq > self.last_seq:
                        self._accept(frame)
                        budget.progressed()
                elif isinstance(frame, Exit):
                    stream.finish()  # the body ends here: read its end to reuse the connection
                    return frame
                elif isinstance(frame, Error):
                    raise self._stream_error(frame)
                if deadline.expired():
                    raise _Expired()
        if self._recovery is not None:  # a clean end without the exit: did the sandbox die?
            self._recovery.check_sandbox(deadline)
        raise CreateosApiError(
            Operation.OUTPUT_CONNECTION, None, detail="the stream ended before the exit frame"
        )

    def _accept(self, frame: Data) -> None:
        if frame.seq != self.last_seq + 1:
            raise lost_output(self.last_seq + 1, frame.seq - 1, "they are missing from the stream")
        self.last_seq = frame.seq
        if self._keep is not None:
            self._keep(frame.stream, frame.data)

    def _connect(self, deadline: Deadline) -> Stream:
        try:
            return self._open_stream(self.last_seq, deadline)
        except CreateosApiError as exc:
            if exc.status == 410:
                oldest = None if self._recovery is None else self._recovery.oldest_seq(deadline)
                through = None if oldest is None else oldest - 1
                raise lost_output(self.last_seq + 1, through, EVICTED_WHY) from None
            if exc.status in REFUSED_FOR_A_DEAD_SANDBOX and self._recovery is not None:
                self._recovery.check_sandbox(deadline)
            raise

    def _stream_error(self, frame: Error) -> ProtocolError:
        if frame.error == EVICTED:
            oldest = frame.oldest_available_seq
            return lost_output(
                self.last_seq + 1, None if oldest is None else oldest - 1, EVICTED_WHY
            )
        code = token(frame.error, ERROR_CODE)
        return ProtocolError(f"the output stream reported an error ({code})")

    def _recover(self, deadline: Deadline) -> Exit | None:
        """The stream keeps dropping: learn how the command ended, and what was not read."""
        assert self._recovery is not None
        log.warning(
            "the output stream keeps dropping after frame %d: waiting for the process's end",
            self.last_seq,
        )
        try:
            ended = self._recovery.wait_end(deadline)
        except OperationTimeout:
            return None
        newest = ended.newest_seq
        if newest is None or newest > self.last_seq:
            self.lost = lost_output(
                self.last_seq + 1,
                newest,
                "the output stream kept dropping, so they could not be read "
                "(the command's exit status was recovered)",
            )
        return ended.exit


def lost_output(first: int, through: int | None, how: str) -> OutputLostError:
    # e.g. "lost 12 output frames (41 to 52): the journal evicted them before they were read"
    """``OutputLostError`` for frames ``first`` to ``through`` (None: to an unknown end)."""
    if through is None or through < first:
        return OutputLostError(f"lost the output after frame {first - 1}: {how}")
    count = through - first + 1
    frames = "1 output frame" if count == 1 else f"{count} output frames"
    return OutputLostError(f"lost {frames} ({first} to {through}): {how}", lost_through=through)


def _is_drop(exc: BaseException) -> bool:
    """A broken connection worth a reconnection: no answer, or a 5xx whose request may
    not have been handled (429 and 503 were already retried by the transport; a 4xx is
    an answer)."""
    return isinstance(exc, CreateosApiError) and (
        exc.status is None or exc.status in UNKNOWN_OUTCOME_STATUSES
    )
