"""The output journal of one process: numbered frames, bounded, with backpressure.

Frames carry ``seq`` numbers that start at 1 and rise by exactly 1 across both
output streams, which is what lets a client replay after a dropped stream.

Capacity is counted in raw bytes. Beyond it the oldest frames are evicted, as
the service does, except while a reader is attached: then ``append`` blocks
until every attached reader has taken the frames that would be evicted. The
pump that called it stops reading the pipe, so the process blocks on write
instead of losing output that a live client has not seen yet.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Frame:
    """One chunk of output, as read from one pipe."""

    seq: int
    stream: str
    data: bytes


@dataclass(frozen=True)
class End:
    """How the process ended; sent after frame ``final_seq``."""

    final_seq: int
    exit_code: int | None
    signal: str | None


class Expired:
    """Marker: the frames a reader needs next were evicted."""


EXPIRED = Expired()


class OffsetExpired(Exception):
    """Frames after the requested offset were already evicted."""


@dataclass(frozen=True)
class Stats:
    oldest_seq: int
    newest_seq: int
    bytes: int


class Journal:
    """Thread-safe journal; pumps ``append``, streams ``attach`` readers."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._cond = threading.Condition()
        self._frames: deque[Frame] = deque()
        self._bytes = 0
        self._next_seq = 1
        self._cursors: dict[int, int] = {}
        self._next_reader = 0
        self._end: End | None = None
        self._closed = False

    def append(self, stream: str, data: bytes) -> None:
        """Add a frame; blocks while room could only be made by dropping unsent frames."""
        with self._cond:
            while not self._make_room(len(data)):
                self._cond.wait()
            self._frames.append(Frame(self._next_seq, stream, data))
            self._next_seq += 1
            self._bytes += len(data)
            self._cond.notify_all()

    def _make_room(self, size: int) -> bool:
        oldest_unsent = min(self._cursors.values(), default=self._next_seq) + 1
        while self._frames and self._bytes + size > self._capacity:
            if self._frames[0].seq >= oldest_unsent and not self._closed:
                return False
            self._bytes -= len(self._frames.popleft().data)
        return True

    def finish(self, exit_code: int | None, signal: str | None) -> None:
        """Record the end of the process after the frames appended so far."""
        with self._cond:
            self._end = End(self._next_seq - 1, exit_code, signal)
            self._cond.notify_all()

    def close(self) -> None:
        """Stop blocking anyone: appends evict freely, readers are woken."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def stats(self) -> Stats:
        with self._cond:
            oldest = self._frames[0].seq if self._frames else self._next_seq
            return Stats(oldest, self._next_seq - 1, self._bytes)

    def readers(self) -> int:
        with self._cond:
            return len(self._cursors)

    def attach(self, after: int) -> Reader:
        """A reader that yields frames with seq > ``after``; raises OffsetExpired."""
        with self._cond:
            oldest = self._frames[0].seq if self._frames else self._next_seq
            if after + 1 < oldest:
                raise OffsetExpired
            reader_id = self._next_reader
            self._next_reader += 1
            self._cursors[reader_id] = after
            return Reader(self, reader_id)

    def _take(self, reader_id: int, timeout: float) -> Frame | End | Expired | None:
        deadline = time.monotonic() + timeout
        with self._cond:
            item = self._next_for(reader_id)
            while item is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
                item = self._next_for(reader_id)
            return item

    def _next_for(self, reader_id: int) -> Frame | End | Expired | None:
        cursor = self._cursors[reader_id]
        if self._end is not None and cursor >= self._end.final_seq:
            return self._end
        if cursor + 1 >= self._next_seq:
            return None
        first = self._frames[0].seq if self._frames else self._next_seq
        if cursor + 1 < first:
            return EXPIRED
        frame = self._frames[cursor + 1 - first]
        self._cursors[reader_id] = frame.seq
        self._cond.notify_all()
        return frame

    def _detach(self, reader_id: int) -> None:
        with self._cond:
            if self._cursors.pop(reader_id, None) is not None:
                self._cond.notify_all()


class Reader:
    """An attached position in a journal; ``close`` releases backpressure."""

    def __init__(self, journal: Journal, reader_id: int) -> None:
        self._journal = journal
        self._id = reader_id

    def next(self, timeout: float) -> Frame | End | Expired | None:
        """The next frame, the end, EXPIRED, or None when ``timeout`` passed idle."""
        return self._journal._take(self._id, timeout)

    def close(self) -> None:
        self._journal._detach(self._id)
