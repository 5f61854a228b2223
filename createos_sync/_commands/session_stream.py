"""The output stream of a command session: attached once, read command by command.

It stays attached between commands (nothing reads it then: the supervisor
writes nothing while idle), so a command costs no reconnection. A read waits
at most until the command's deadline (``Stream.read_within``): a stream
broken by a deadline, or dropped by the network, is reattached from the last
sequence number seen, skipping frames already read; a sequence gap or an
evicted offset is ``OutputLostError``, as for any managed process.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

import attrs

from .._sandboxes import sandbox as _sandbox
from .._sandboxes.box import Box
from .._wire import api as _api
from .._wire.api.common import STREAM_IDLE_TIMEOUT
from .._wire.deadline import Deadline
from .._wire.http import Stream
from .._wire.ndjson import Data, Error, Exit, parse_frame, split_lines
from .._wire.retry import UNKNOWN_OUTCOME_STATUSES
from ..errors import CreateosApiError, ProtocolError
from . import framing
from .follow import EVICTED, EVICTED_WHY, REFUSED_FOR_A_DEAD_SANDBOX, lost_output

if TYPE_CHECKING:
    from ..cancel import Cancel
    from .inflight import InFlight

log = logging.getLogger("createos_sync.process")

RECONNECTS = 5  # in a row without a frame: the stream is gone
ACK_WAIT = 10.0  # seconds for the record that says a command was read (it comes at once)
BACKOFF = 0.1
SUPERVISOR_COULD_NOT_START = 97  # supervisor.sh: no private directory for its FIFOs


@attrs.frozen
class SupervisorEnded:
    """The supervisor process itself ended: its exit frame."""

    exit: Exit


class SessionStream:
    def __init__(self, box: Box, process_id: str) -> None:
        self._box = box
        self._id = process_id
        self.last_seq = 0
        self._stream: Stream | None = None
        self._lines: Iterator[bytes] | None = None
        self._scanners: dict[str, framing.RecordScanner] = {}
        self._bound: Deadline | None = None  # the deadline cutting the stream now
        self._cancel: Cancel | None = None  # what may cut the command's reads short

    def attach(self, deadline: Deadline) -> None:
        """Connect from the last sequence number seen (1 request)."""
        self.close()
        try:
            stream = _api.connect_output(
                self._box.transport, self._box.sandbox_id, self._id, self.last_seq, deadline
            )
            stream.bound_by(None)  # it serves later commands, each bounded by its own deadline
        except CreateosApiError as exc:
            if exc.status == 410:
                raise lost_output(self.last_seq + 1, None, EVICTED_WHY) from None
            if exc.status in REFUSED_FOR_A_DEAD_SANDBOX:
                _sandbox.raise_if_unavailable(
                    self._box.transport, self._box.sandbox_id, deadline,
                    f"it stopped serving while command session {self._id} ran",
                    self._box.explain,
                )  # fmt: skip
            raise
        self._stream = stream
        self._lines = split_lines(stream.chunks())
        self._bound = None

    def attach_retrying(self, deadline: Deadline) -> None:
        """``attach``, reconnecting after a drop as a stream does (before any command)."""
        failures = 0
        while True:
            try:
                self.attach(deadline)
                return
            except CreateosApiError as exc:
                failures += 1
                if not _is_drop(exc) or failures > RECONNECTS or deadline.expired():
                    raise
                if failures > 1:
                    self._box.sleep(min(2.0, BACKOFF * 2 ** (failures - 2)))

    def unbind(self) -> None:
        """The command is over: its deadline no longer cuts the stream."""
        if self._stream is not None and self._bound is not None:
            self._stream.bound_by(None)
        self._bound = None

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
        self._stream = None
        self._lines = None

    def listen(self, current: InFlight) -> None:
        """Route the next frames to ``current``: output to its sinks, records to it."""
        self._scanners = {
            name: framing.RecordScanner(
                current.tokens,
                lambda data, name=name: current.take(name, data),  # type: ignore[misc]
                lambda record, name=name: current.record(name, record),  # type: ignore[misc]
            )
            for name in ("stdout", "stderr")
        }

    def until_done(
        self, current: InFlight, deadline: Deadline, cancel: Cancel | None = None
    ) -> SupervisorEnded | None:
        """Read until the command's end records; None once they came, or the deadline or
        ``cancel`` did (a cancel cuts the stream, as the deadline does)."""
        self._cancel = cancel
        try:
            if cancel is None:
                return self._until_done(current, deadline)
            with cancel.waking(self._cut):
                return self._until_done(current, deadline)
        finally:
            self._cancel = None
            if cancel is not None and cancel.is_set():
                self.close()  # it may have been cut: the next read reattaches
            self.unbind()

    def _cut(self) -> None:
        stream = self._stream
        if stream is not None:
            stream.cut()

    def _stopped(self, deadline: Deadline) -> bool:
        return deadline.expired() or (self._cancel is not None and self._cancel.is_set())

    def _until_done(self, current: InFlight, deadline: Deadline) -> SupervisorEnded | None:
        while not current.done:
            # Until the supervisor says it read the command, a silent stream may be one that
            # died while the lease was idle (a NAT forgot it): reattach rather than wait.
            frame = self._next(deadline, STREAM_IDLE_TIMEOUT if current.accepted else ACK_WAIT)
            if frame is None:
                return None
            if isinstance(frame, Exit):
                self._flush()
                return SupervisorEnded(frame)
        return None

    def until_killed(self, current: InFlight, deadline: Deadline) -> int | SupervisorEnded:
        try:
            return self._until_killed(current, deadline)
        finally:
            self.unbind()

    def _until_killed(self, current: InFlight, deadline: Deadline) -> int | SupervisorEnded:
        """Read until the kill report and the end records; the processes left (1: unknown)."""
        current.killed_left = None
        while current.killed_left is None or not (current.done or current.never_ran):
            frame = self._next(deadline)
            if frame is None:
                return 1 if current.killed_left is None else max(current.killed_left, 1)
            if isinstance(frame, Exit):
                self._flush()
                return SupervisorEnded(frame)
        return current.killed_left

    def read_end(self, deadline: Deadline) -> bool:
        """True if the supervisor exited because it could not start (it read nothing)."""
        try:
            while True:
                frame = self._next(deadline)
                if frame is None:
                    return False
                if isinstance(frame, Exit):
                    return frame.exit_code == SUPERVISOR_COULD_NOT_START
        except CreateosApiError:
            return False

    def _flush(self) -> None:
        for scanner in self._scanners.values():
            scanner.flush()

    def _next(
        self, deadline: Deadline, patience: float = STREAM_IDLE_TIMEOUT
    ) -> Exit | Data | None:
        """The next data or exit frame, fed to the scanners; None at the deadline. A read
        silent for ``patience`` seconds counts as a drop (reattached, nothing lost)."""
        failures = 0
        while True:
            if self._stopped(deadline):
                return None
            try:
                if self._lines is None:
                    self.attach(deadline)
                assert self._stream is not None and self._lines is not None
                if self._bound is not deadline:  # a trickle must not outlive the deadline
                    self._stream.bound_by(deadline)
                    self._bound = deadline
                if self._stopped(deadline):  # after arming what a cancel cuts (Cancel.waking)
                    return None
                self._stream.read_within(max(0.001, min(deadline.remaining(), patience)))
                line = next(self._lines)
            except StopIteration:  # a clean end without the exit frame: did the sandbox die?
                self.close()
                _sandbox.raise_if_unavailable(
                    self._box.transport, self._box.sandbox_id, deadline,
                    f"it stopped serving while process {self._id} ran", self._box.explain,
                )  # fmt: skip
                failures += 1
                if failures > RECONNECTS:
                    raise CreateosApiError(
                        "process.connect", None, detail="the session's stream keeps ending"
                    ) from None
                if failures > 1:
                    self._box.sleep(min(2.0, BACKOFF * 2 ** (failures - 2)))
                continue
            except CreateosApiError as exc:
                self.close()
                if self._stopped(deadline):
                    return None
                if not _is_drop(exc):
                    raise
                failures += 1
                if failures > RECONNECTS:
                    raise
                if failures > 1:
                    self._box.sleep(min(2.0, BACKOFF * 2 ** (failures - 2)))
                continue
            frame = parse_frame(line)
            if isinstance(frame, Data):
                if frame.seq <= self.last_seq:
                    continue
                if frame.seq != self.last_seq + 1:
                    raise lost_output(
                        self.last_seq + 1, frame.seq - 1, "they are missing from the stream"
                    )
                self.last_seq = frame.seq
                failures = 0
                scanner = self._scanners.get(frame.stream)
                if scanner is not None:
                    scanner.feed(frame.data)
                return frame
            if isinstance(frame, Exit):
                return frame
            if isinstance(frame, Error):
                if frame.error == EVICTED:
                    oldest = frame.oldest_available_seq
                    raise lost_output(
                        self.last_seq + 1, None if oldest is None else oldest - 1, EVICTED_WHY
                    )
                raise ProtocolError("the command session's stream reported an error")


def _is_drop(exc: CreateosApiError) -> bool:
    """No answer, or a 5xx whose request may not have been handled: worth reconnecting."""
    return exc.status is None or exc.status in UNKNOWN_OUTCOME_STATUSES
