"""Keystrokes to a remote terminal: batched, paced, in order, one request at a time.

Every input request costs 1/300 of the machine's minute, so a key must not
cost a request of its own when typing is fast. What arrives while a request
is in flight goes in the next one, and a token bucket (``BURST`` requests at
once, ``RATE`` per second after that) spaces requests out: a key typed after
a pause leaves at once, while steady typing at 5 keys per second costs about
``RATE`` requests per second, 2 or 3 keys each. A paste is one read, so one
request (split at ``MAX_BATCH`` bytes). Window size changes are coalesced:
only the latest size is sent, before the keys typed after it. See
``bench/terminal.py`` for what a minute of typing costs and how long a
keystroke takes to come back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

RATE = 2.0  # requests per second, sustained: 120 a minute at most
BURST = 4.0  # requests that may leave back to back after a pause
MAX_BATCH = 64 * 1024  # bytes of input per request

Size = tuple[int, int]
Request = bytes | Size  # keys to type, or a new (rows, cols)


class Batcher:
    """What to send next and when: the batching policy, free of threads and clocks."""

    def __init__(self, now: float, *, rate: float = RATE, burst: float = BURST) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = burst
        self._stamp = now
        self._keys = bytearray()
        self._size: Size | None = None
        self._size_first = False  # the pending size came before the pending keys

    def type(self, data: bytes) -> None:
        self._keys += data

    def resize(self, size: Size) -> None:
        if self._size is None:
            self._size_first = not self._keys  # typed after the resize: sent after it
        self._size = size

    @property
    def pending(self) -> bool:
        return bool(self._keys) or self._size is not None

    def delay(self, now: float) -> float:
        """Seconds before the next request may leave (0: now)."""
        self._refill(now)
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.rate

    def take(self, now: float) -> Request:
        """The next request, charged to the bucket, in the order typed. Needs ``pending``."""
        self._refill(now)
        self._tokens -= 1
        if self._keys and not (self._size is not None and self._size_first):
            batch = bytes(self._keys[:MAX_BATCH])
            del self._keys[:MAX_BATCH]
            return batch
        size, self._size = self._size, None
        assert size is not None, "take() called with nothing pending"
        return size

    def _refill(self, now: float) -> None:
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now


class Typist:
    """Sends what ``type`` and ``resize`` are given, from a thread, one request at a time.

    Requests never overlap, so keys arrive in the order they were typed. A
    failed request stops the typist: ``error`` holds it and ``on_stop`` is
    called, so that the session can end.
    """

    def __init__(
        self,
        send: Callable[[bytes], None],
        resize: Callable[[int, int], None],
        *,
        on_stop: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._send = send
        self._resize = resize
        self._on_stop = on_stop
        self._clock = clock
        self._batcher = Batcher(clock())
        self._changed = threading.Condition()
        self._closed = False
        self.error: BaseException | None = None
        self.requests = 0
        self._thread = threading.Thread(target=self._run, name="createos-typist", daemon=True)
        self._thread.start()

    def type(self, data: bytes) -> None:
        with self._changed:
            self._batcher.type(data)
            self._changed.notify()

    def resize(self, rows: int, cols: int) -> None:
        with self._changed:
            self._batcher.resize((rows, cols))
            self._changed.notify()

    def close(self, timeout: float | None = None) -> None:
        """Stop; what was not sent yet is dropped (the remote program has ended)."""
        with self._changed:
            self._closed = True
            self._changed.notify()
        self._thread.join(timeout)

    def _next(self) -> Request | None:
        with self._changed:
            while True:
                if self._closed:
                    return None
                wait = self._batcher.delay(self._clock()) if self._batcher.pending else None
                if wait == 0.0:
                    return self._batcher.take(self._clock())
                self._changed.wait(wait)

    def _run(self) -> None:
        try:
            while (request := self._next()) is not None:
                self.requests += 1
                if isinstance(request, bytes):
                    self._send(request)
                else:
                    self._resize(*request)
        except BaseException as exc:  # handed to the session, which reports it
            self.error = exc
        finally:
            self._on_stop()
