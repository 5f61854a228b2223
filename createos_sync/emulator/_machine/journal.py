"""The output journal of one process: numbered frames, bounded, with backpressure.

Frames carry ``seq`` numbers that start at 1 and rise by exactly 1 across both
output streams, which is what lets a client replay after a dropped stream.

Capacity is counted in raw bytes. Beyond it the oldest frames are evicted, as
the service does, except while a reader is attached: then ``append`` blocks
until every attached reader has delivered the frames that would be evicted.
The pump that called it stops reading the pipe, so the process blocks on
write instead of losing output that a live client has not seen yet.

Eviction is by size alone: a frame handed to a connection that then dropped
stays replayable until room is needed for newer output. So a reader counts a
frame as delivered only once it asks for the next one (the previous one was
written to the client by then), and a reader whose connection dropped
leaves a hold at what it delivered, for ``DROPPED_HOLD`` seconds or until a
reader attaches again: the client reconnecting with ``after=<last seq
seen>`` finds every frame it missed, however fast the process writes.

A journal can also be aborted (the sandbox failed under it): its readers
end at once, without the exit, and so does any reader attached later.
"""

from __future__ import annotations

import signal
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

    def exec_status(self) -> tuple[int, str | None]:
        """Exec reports a shell-style code; a signal also becomes an error string."""
        if self.signal is None:
            return self.exit_code if self.exit_code is not None else -1, None
        signum = getattr(signal, self.signal, None)
        code = 128 + int(signum) if signum is not None else -1
        return code, f"terminated by {self.signal}"


DROPPED_HOLD = 2.0  # seconds: the SDK reconnects at once, then after 0.25, 0.5, 1 s


@dataclass(frozen=True)
class Expired:
    """The frames a reader needs next were evicted; the journal now starts at ``oldest_seq``."""

    oldest_seq: int


class Aborted:
    """Marker: the journal was aborted (its sandbox failed); no exit will come."""


ABORTED = Aborted()


class OffsetExpired(Exception):
    """Frames after the requested offset were already evicted."""

    def __init__(self, oldest_seq: int) -> None:
        super().__init__(oldest_seq)
        self.oldest_seq = oldest_seq


@dataclass(frozen=True)
class Stats:
    oldest_seq: int
    newest_seq: int
    bytes: int


class Journal:
    """Thread-safe journal; pumps ``append``, streams ``attach`` readers."""

    def __init__(self, capacity: int, *, dropped_hold: float = DROPPED_HOLD) -> None:
        self._capacity = capacity
        self._dropped_hold = dropped_hold
        self._cond = threading.Condition()
        self._frames: deque[Frame] = deque()
        self._bytes = 0
        self._next_seq = 1
        self._cursors: dict[int, int] = {}  # what each reader has taken
        self._delivered: dict[int, int] = {}  # what each reader has written to its client
        self._holds: dict[int, tuple[int, float]] = {}  # dropped readers: (delivered, until)
        self._next_reader = 0
        self._end: End | None = None
        self._closed = False
        self._aborted = False

    def append(self, stream: str, data: bytes) -> None:
        """Add a frame; blocks while room could only be made by dropping undelivered frames."""
        with self._cond:
            while not self._make_room(len(data)):
                self._cond.wait(self._next_hold_expiry())
            self._frames.append(Frame(self._next_seq, stream, data))
            self._next_seq += 1
            self._bytes += len(data)
            self._cond.notify_all()

    def _make_room(self, size: int) -> bool:
        now = time.monotonic()
        self._holds = {k: hold for k, hold in self._holds.items() if hold[1] > now}
        held = [seq for seq, _ in self._holds.values()]
        oldest_undelivered = min([*self._delivered.values(), *held], default=self._next_seq) + 1
        while self._frames and self._bytes + size > self._capacity:
            if self._frames[0].seq >= oldest_undelivered and not self._closed:
                return False
            self._bytes -= len(self._frames.popleft().data)
        return True

    def _next_hold_expiry(self) -> float | None:
        if not self._holds:
            return None
        return max(0.0, min(until for _, until in self._holds.values()) - time.monotonic())

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

    def abort(self) -> None:
        """The sandbox failed: every reader ends now, without the exit (none will come)."""
        with self._cond:
            self._aborted = self._closed = True
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
            if after + 1 < oldest and not self._aborted:
                raise OffsetExpired(oldest)
            reader_id = self._next_reader
            self._next_reader += 1
            self._cursors[reader_id] = self._delivered[reader_id] = after
            self._holds.clear()  # the client is back: its new position protects what it needs
            return Reader(self, reader_id)

    def _take(self, reader_id: int, timeout: float) -> Item:
        deadline = time.monotonic() + timeout
        with self._cond:
            # Asking for the next item means the previous one was written to the client.
            if self._delivered[reader_id] != self._cursors[reader_id]:
                self._delivered[reader_id] = self._cursors[reader_id]
                self._cond.notify_all()
            item = self._next_for(reader_id)
            while item is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
                item = self._next_for(reader_id)
            return item

    def _next_for(self, reader_id: int) -> Item:
        if self._aborted:
            return ABORTED
        cursor = self._cursors[reader_id]
        if self._end is not None and cursor >= self._end.final_seq:
            return self._end
        if cursor + 1 >= self._next_seq:
            return None
        first = self._frames[0].seq if self._frames else self._next_seq
        if cursor + 1 < first:
            return Expired(first)
        frame = self._frames[cursor + 1 - first]
        self._cursors[reader_id] = frame.seq
        self._cond.notify_all()
        return frame

    def _detach(self, reader_id: int, *, dropped: bool) -> None:
        with self._cond:
            self._cursors.pop(reader_id, None)
            delivered = self._delivered.pop(reader_id, None)
            if dropped and delivered is not None and not self._closed:
                self._holds[reader_id] = (delivered, time.monotonic() + self._dropped_hold)
            self._cond.notify_all()


Item = Frame | End | Expired | Aborted | None


class Reader:
    """An attached position in a journal; ``close`` releases backpressure."""

    def __init__(self, journal: Journal, reader_id: int) -> None:
        self._journal = journal
        self._id = reader_id

    def next(self, timeout: float) -> Item:
        """The next frame, the end, Expired, ABORTED, or None when ``timeout`` passed idle.

        Calling it again means the previous frame was delivered.
        """
        return self._journal._take(self._id, timeout)

    def close(self) -> None:
        """Detach after the end: nothing more is needed from the journal."""
        self._journal._detach(self._id, dropped=False)

    def drop(self) -> None:
        """Detach because the connection dropped: what was not delivered stays held a while."""
        self._journal._detach(self._id, dropped=True)
