"""Following one process's output: sequence, replay, gaps, reconnection, UTF-8 decoding.

The one stream model of the package, serving ``Lease.run`` and background
processes alike. A connection may drop at any time without ending the
process: the follower reconnects to the same process with
``after=<last seq seen>`` and skips frames it already has, so output is
neither lost nor duplicated. A sequence gap or an evicted offset means the
journal dropped output before it was read: that is ``OutputLostError``,
never a silent hole.
"""

from __future__ import annotations

import codecs
import re
import time
from collections.abc import Callable

from . import _retry
from ._deadline import Deadline
from ._http import Stream
from ._ndjson import Data, Error, Exit, parse_frame, split_lines
from ._retry import RETRYABLE_SERVER_STATUSES
from .errors import (
    CreateosApiError,
    Operation,
    OperationTimeout,
    OutputLostError,
    ProtocolError,
)

Deliver = Callable[[str, str], None]
Keep = Callable[[str, bytes], None]
OpenStream = Callable[[int, Deadline], Stream]

EVICTED = "output_offset_expired"
_ERROR_CODE = re.compile(r"[a-z0-9_.-]{1,64}\Z")


class _Expired(Exception):
    """The deadline passed while reading."""


class _ReleaseFailed(Exception):
    """The start-gate release failed: not a reason to reconnect."""


class Follower:
    """Reads a process's output journal from ``after + 1`` to its exit frame.

    ``deliver(stream, text)`` receives decoded text in order; a multi-byte
    character split across frames is decoded once both halves arrived.
    ``keep(stream, data)`` receives each frame's raw bytes (the capture,
    which decodes once at the end); without ``deliver`` nothing is decoded.
    """

    def __init__(
        self,
        open_stream: OpenStream,
        deliver: Deliver | None,
        *,
        keep: Keep | None = None,
        after: int = 0,
        sleep: _retry.Sleep = time.sleep,
    ) -> None:
        self._open_stream = open_stream
        self._deliver = deliver
        self._keep = keep
        self._sleep = sleep
        self.last_seq = after
        self.exit: Exit | None = None
        self._decoders = {
            name: codecs.getincrementaldecoder("utf-8")("replace") for name in ("stdout", "stderr")
        }

    def follow(
        self, deadline: Deadline, on_attached: Callable[[], None] | None = None
    ) -> Exit | None:
        """Read to the exit frame and return it; None if the deadline came first.

        ``on_attached`` runs once, as soon as the first connection is
        established (it releases the start gate).
        """
        if self.exit is not None:
            return self.exit
        budget = _retry.ReconnectBudget()
        pending = [on_attached] if on_attached is not None else []
        try:
            self.exit = budget.call(
                lambda: self._read_once(deadline, budget, pending),
                retry_on=_is_drop,
                deadline=deadline,
                sleep=self._sleep,
            )
        except (_Expired, OperationTimeout):
            return None
        except _ReleaseFailed as failure:
            raise failure.__cause__ or failure from None
        except CreateosApiError as exc:
            if exc.status is None and deadline.expired():
                return None  # the read timed out because the deadline passed
            raise
        self.flush()
        return self.exit

    def flush(self) -> None:
        """Deliver what the decoders still hold (an incomplete character becomes U+FFFD)."""
        if self._deliver is None:
            return
        for name, decoder in self._decoders.items():
            text = decoder.decode(b"", final=True)
            if text:
                self._deliver(name, text)

    def _read_once(
        self, deadline: Deadline, budget: _retry.ReconnectBudget, pending: list[Callable[[], None]]
    ) -> Exit:
        stream = self._connect(deadline)
        with stream:
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
                    raise _stream_error(frame.error)
                if deadline.expired():
                    raise _Expired()
        raise CreateosApiError(
            Operation.OUTPUT_CONNECTION, None, detail="the stream ended before the exit frame"
        )

    def _accept(self, frame: Data) -> None:
        if frame.seq != self.last_seq + 1:
            raise OutputLostError(
                f"output frames {self.last_seq + 1} to {frame.seq - 1} are missing from the stream"
            )
        self.last_seq = frame.seq
        if self._keep is not None:
            self._keep(frame.stream, frame.data)
        if self._deliver is not None:
            text = self._decoders[frame.stream].decode(frame.data)
            if text:
                self._deliver(frame.stream, text)

    def _connect(self, deadline: Deadline) -> Stream:
        try:
            return self._open_stream(self.last_seq, deadline)
        except CreateosApiError as exc:
            if exc.status == 410:
                raise OutputLostError(
                    f"output after frame {self.last_seq} was evicted from the journal "
                    "before it was read"
                ) from None
            raise


def _is_drop(exc: BaseException) -> bool:
    """A broken or refused connection worth a reconnection (a 4xx is not)."""
    return isinstance(exc, CreateosApiError) and (
        exc.status is None or exc.status in RETRYABLE_SERVER_STATUSES
    )


def _stream_error(error: str) -> ProtocolError:
    if error == EVICTED:
        return OutputLostError("the journal evicted output before it was read")
    code = error if _ERROR_CODE.match(error) else "unrecognised"
    return ProtocolError(f"the output stream reported an error ({code})")
