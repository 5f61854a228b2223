"""Where decoded output goes: bounded capture, the user's callback, live echo, and the
bounded queue a background process's ``output()`` reads."""

from __future__ import annotations

import collections
import sys
import threading
from collections.abc import Callable, Iterator

OnOutput = Callable[[str, str], None]


class TailBuffer:
    """Keeps the last ``limit`` characters written.

    A write never copies earlier text: whole chunks are dropped from the front
    as soon as the chunks after them hold ``limit`` characters on their own,
    and the kept tail is joined once, when it is read. Small writes are
    batched into chunks of at least ``BATCH`` characters first, so that
    memory stays within ``limit`` plus one chunk however text arrives.
    """

    BATCH = 8192

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.truncated = False
        self._chunks: collections.deque[str] = collections.deque()
        self._small: list[str] = []
        self._small_size = 0
        self._size = 0

    def write(self, text: str) -> None:
        size = len(text)
        if not size:
            return
        self._size += size
        if size < self.BATCH or self._small:
            self._small.append(text)
            self._small_size += size
            if self._small_size < self.BATCH:
                return
            text = "".join(self._small)
            self._small.clear()
            self._small_size = 0
        chunks = self._chunks
        chunks.append(text)
        while chunks and self._size - len(chunks[0]) >= self.limit:
            self._size -= len(chunks.popleft())
            self.truncated = True

    @property
    def held(self) -> int:
        """Characters held right now (at most ``limit`` plus one chunk)."""
        return self._size

    def getvalue(self) -> str:
        if not self._small and len(self._chunks) == 1 and self._size <= self.limit:
            return self._chunks[0]
        parts = [*self._chunks, *self._small]
        excess = self._size - self.limit
        if excess > 0:  # cut before joining, so that the tail is built only once
            self.truncated = True
            while parts and excess >= len(parts[0]):
                excess -= len(parts.pop(0))
            if parts:
                parts[0] = parts[0][excess:]
        text = "".join(parts)
        self._chunks.clear()
        self._small.clear()
        self._small_size = 0
        if text:
            self._chunks.append(text)
        self._size = len(text)
        return text


class Capture:
    """The captured stdout and stderr of one process, each bounded by ``max_output``."""

    def __init__(self, max_output: int) -> None:
        self.stdout = TailBuffer(max_output)
        self.stderr = TailBuffer(max_output)

    def write(self, stream: str, text: str) -> None:
        (self.stderr if stream == "stderr" else self.stdout).write(text)

    @property
    def truncated(self) -> bool:
        self.stdout.getvalue()
        self.stderr.getvalue()
        return self.stdout.truncated or self.stderr.truncated


def echo(stream: str, text: str) -> None:
    """Write live output to this process's own stdout / stderr (works in Jupyter)."""
    target = sys.stderr if stream == "stderr" else sys.stdout
    target.write(text)
    target.flush()


def fan_out(*sinks: OnOutput | None) -> OnOutput:
    """One deliver function calling every given sink, in order."""
    active = [sink for sink in sinks if sink is not None]
    if len(active) == 1:
        return active[0]

    def deliver(stream: str, text: str) -> None:
        for sink in active:
            sink(stream, text)

    return deliver


class LiveOutput:
    """Output waiting for ``Process.output()``: bounded, never blocking the follower."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._items: collections.deque[tuple[str, str]] = collections.deque()
        self._size = 0
        self._ended = False
        self._ready = threading.Condition()

    def put(self, stream: str, text: str) -> None:
        with self._ready:
            self._items.append((stream, text))
            self._size += len(text)
            while self._size > self._limit and len(self._items) > 1:
                self._size -= len(self._items.popleft()[1])
            self._ready.notify_all()

    def end(self) -> None:
        with self._ready:
            self._ended = True
            self._ready.notify_all()

    def drain(self) -> Iterator[tuple[str, str]]:
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._items or self._ended)
                if not self._items:
                    return
                item = self._items.popleft()
                self._size -= len(item[1])
            yield item
