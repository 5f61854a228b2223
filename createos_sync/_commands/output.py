"""Where output goes: ``Output``, fed each frame's raw bytes by whichever path reads them.

It keeps the bounded capture (raw bytes, decoded once when read, or kept as
bytes with ``text=False``), and hands live output to the user's callback,
echo, and the bounded queue a background process's ``output()`` reads:
decoded incrementally per stream in text mode, so that a character split
across frames arrives whole, or as the exact bytes.
"""

from __future__ import annotations

import codecs
import collections
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

# A live sink: ``(stream, data)``, data ``str`` in text mode and ``bytes`` without.
OnOutput = Callable[[str, Any], None]
STREAMS = ("stdout", "stderr")
_CONTINUATION = bytes(range(0x80, 0xC0))
_MOST_BYTES_PER_CHARACTER = 4  # in UTF-8; an invalid byte is a character of its own
# 1 for a byte that starts a character (or is invalid on its own), 0 for a continuation byte.
_STARTS = bytes(0 if 0x80 <= byte < 0xC0 else 1 for byte in range(256))


class TailBuffer:
    """Keeps the last ``limit`` characters of a UTF-8 byte stream, decoding them once.

    Output is kept as the bytes that arrived and decoded when read: decoding
    every frame into str and joining large str chunks (4 bytes a character
    once one emoji is in) cost as much as everything else a capture does.
    While fewer than ``limit`` bytes arrived (so fewer than ``limit``
    characters: all are kept), they go into one growing ``bytearray``, which
    is decoded as it is: no chunk objects, no join.

    Past that, the bytes are kept in chunks and characters are counted without
    decoding: each one begins with exactly one byte that is not a UTF-8
    continuation byte (0x80-0xBF), and an invalid byte decodes to one U+FFFD
    of its own, so counting the other bytes (``bytes.translate``, a C loop)
    never overcounts. Whole chunks are dropped from the front once the chunks
    after them hold ``limit`` such characters; the continuation bytes that a
    dropped chunk leaves at the front of the next one decode to replacement
    characters that the final cut removes, and from the first byte after them
    the decode is the stream's own (UTF-8 resynchronises). Writes under
    ``BATCH`` bytes are batched first. A chunk longer than the most bytes
    ``limit`` characters take (4 each) is counted from its end first: when
    that suffix holds ``limit`` characters, the rest and everything before it
    are dropped uncounted (a small ``max_output`` beside a callback costs no
    pass over each frame). Memory: the bytes of ``limit`` characters, plus one
    chunk and one batch.
    """

    BATCH = 8192

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._head = bytearray()  # everything, while it is at most limit bytes
        self._chunks: collections.deque[bytes] = collections.deque()  # past that
        self._counts: collections.deque[int] = collections.deque()  # characters per chunk
        self._small = bytearray()  # tiny writes, batched so that memory stays bounded
        self._size = 0
        self._chars = 0
        self._dropped = False
        self._text: str | None = None
        self._cut = False

    def write(self, data: bytes) -> None:
        if not data:
            return
        self._text = None
        self._size += len(data)
        if not self._chunks:
            self._head += data
            if self._size <= self.limit:
                return  # fewer bytes than limit are fewer characters: all are kept
            head, self._head = memoryview(self._head), bytearray()
            if len(head) > _MOST_BYTES_PER_CHARACTER * self.limit:
                self._append(bytes(head))  # counted from its end, cut to its last characters
                return
            for start in range(0, len(head), self.BATCH):  # chunks small enough to drop
                self._append(bytes(head[start : start + self.BATCH]))
            return
        if len(data) < self.BATCH or self._small:
            self._small += data
            if len(self._small) < self.BATCH:
                return
            data = bytes(self._small)
            self._small.clear()
        self._append(data)

    def _append(self, data: bytes) -> None:
        chunks, counts = self._chunks, self._counts
        enough = _MOST_BYTES_PER_CHARACTER * self.limit
        if len(data) > enough:
            suffix = data[len(data) - enough :]
            count = _characters(suffix)
            if count >= self.limit:  # the suffix alone holds the tail: drop all before it
                chunks.clear()
                counts.clear()
                self._size, self._chars, self._dropped = len(suffix), 0, True
                data = suffix
            else:  # invalid UTF-8 (continuation bytes): count the whole chunk
                count = _characters(data)
        else:
            count = _characters(data)
        chunks.append(data)
        counts.append(count)
        self._chars += count
        while len(chunks) > 1 and self._chars - counts[0] >= self.limit:
            self._chars -= counts.popleft()
            self._size -= len(chunks.popleft())
            self._dropped = True

    @property
    def held(self) -> int:
        """Bytes held right now (those of at most ``limit`` characters plus one chunk)."""
        return self._size

    @property
    def truncated(self) -> bool:
        """True if output was cut: more than ``limit`` characters were written."""
        self.getvalue()
        return self._dropped or self._cut

    def getvalue(self) -> str:
        if self._text is not None:
            return self._text
        if not self._chunks:
            self._text = self._head.decode("utf-8", "replace")  # at most limit characters
            return self._text
        if self._small:
            self._append(bytes(self._small))
            self._small.clear()
        self._cut_front()
        chunks = self._chunks
        if len(chunks) > 1:  # keep the joined bytes: a later read or write starts from them
            joined = b"".join(chunks)
            chunks.clear()
            chunks.append(joined)
            self._counts.clear()
            self._counts.append(self._chars)
        text = chunks[0].decode("utf-8", "replace")
        if len(text) > self.limit:  # only invalid UTF-8 decodes to more than was counted
            text = text[len(text) - self.limit :]
            self._cut = True
        self._text = text
        return text

    def _cut_front(self) -> None:
        """Cut the first chunk where the last ``limit`` counted characters begin.

        Decoding then builds the tail alone: slicing it out of a longer decoded
        str would copy megabytes of text once more.
        """
        excess = self._chars - self.limit
        if excess <= 0:
            return
        front = self._chunks[0]  # dropping keeps fewer than limit characters after it
        start = _start_of_character(front, excess)
        self._chunks[0] = front[start:]
        self._counts[0] -= excess
        self._chars -= excess
        self._size -= start
        self._cut = True


def _characters(data: bytes) -> int:
    """The characters ``data`` begins (bytes that are not UTF-8 continuation bytes)."""
    return len(data) if data.isascii() else len(data.translate(None, _CONTINUATION))


def _start_of_character(data: bytes, skip: int) -> int:
    """The offset of the character that follows the first ``skip`` in ``data``.

    A binary search over counts of character starts, each a C loop: no
    Python loop over the bytes.
    """
    marks = data.translate(_STARTS)
    low, high = 0, len(marks)
    while low < high:
        middle = (low + high) // 2
        if marks.count(1, 0, middle + 1) > skip:
            high = middle
        else:
            low = middle + 1
    return low


class ByteTail:
    """Keeps the last ``limit`` bytes of a stream, exactly as they came (``text=False``).

    One ``bytearray`` grows to at most twice ``limit`` (plus one batch) before
    its front is cut, so a write costs amortised O(its length) and memory stays
    bounded, whatever the size of the frames.
    """

    BATCH = 8192

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._bytes = bytearray()
        self._cut = False

    def write(self, data: bytes) -> None:
        self._bytes += data
        if len(self._bytes) > 2 * self.limit + self.BATCH:
            self._trim()

    def _trim(self) -> None:
        excess = len(self._bytes) - self.limit
        if excess > 0:
            del self._bytes[:excess]
            self._cut = True

    @property
    def held(self) -> int:
        """Bytes held right now (at most twice ``limit`` plus one batch)."""
        return len(self._bytes)

    @property
    def truncated(self) -> bool:
        """True if output was cut: more than ``limit`` bytes were written."""
        self._trim()
        return self._cut

    def getvalue(self) -> bytes:
        self._trim()
        return bytes(self._bytes)


class Capture:
    """The captured stdout and stderr of one process, each bounded by ``max_output``
    (characters with ``text``, bytes without). It takes the raw bytes of each frame."""

    def __init__(self, max_output: int, *, text: bool = True) -> None:
        tail = TailBuffer if text else ByteTail
        self.stdout: TailBuffer | ByteTail = tail(max_output)
        self.stderr: TailBuffer | ByteTail = tail(max_output)

    def write(self, stream: str, data: bytes) -> None:
        (self.stderr if stream == "stderr" else self.stdout).write(data)

    @property
    def truncated(self) -> bool:
        return self.stdout.truncated or self.stderr.truncated


class Output:
    """One process's output, fed raw bytes: the capture, and the live sinks.

    Every command path feeds it alike: ``write(stream, data)`` with each
    frame's bytes, in order, as they are read (``stream`` is ``"stdout"`` or
    ``"stderr"``), then ``end()`` once no more will come. It decodes only at
    its edges: the capture when read (``stdout`` / ``stderr``), the live
    sinks as frames arrive, each stream through its own incremental decoder
    (an invalid byte becomes U+FFFD; an incomplete character at ``end()``
    too). With ``text=False`` nothing is decoded: the sinks get the frames'
    bytes and the capture keeps the last ``max_output`` bytes.
    """

    def __init__(
        self, max_output: int, *, text: bool = True, sinks: tuple[OnOutput | None, ...] = ()
    ) -> None:
        self.text = text
        self.capture = Capture(max_output, text=text)
        self._deliver = fan_out(*sinks)
        self._decoders = {
            name: codecs.getincrementaldecoder("utf-8")("replace") for name in STREAMS
        }

    def write(self, stream: str, data: bytes) -> None:
        """Take one frame's bytes (called from one thread at a time, in stream order)."""
        self.capture.write(stream, data)
        if self._deliver is None or not data:
            return  # a run that only captures never decodes on the way
        if not self.text:
            self._deliver(stream, bytes(data))
            return
        text = self._decoders["stderr" if stream == "stderr" else "stdout"].decode(data)
        if text:
            self._deliver(stream, text)

    def end(self) -> None:
        """Deliver what the decoders still hold (an incomplete character becomes U+FFFD)."""
        if self._deliver is None or not self.text:
            return
        for name, decoder in self._decoders.items():
            text = decoder.decode(b"", final=True)
            if text:
                self._deliver(name, text)

    @property
    def stdout(self) -> Any:
        """The captured stdout: ``str`` in text mode, ``bytes`` without."""
        return self.capture.stdout.getvalue()

    @property
    def stderr(self) -> Any:
        """The captured stderr: ``str`` in text mode, ``bytes`` without."""
        return self.capture.stderr.getvalue()

    @property
    def truncated(self) -> bool:
        return self.capture.truncated


def echo(stream: str, data: str | bytes) -> None:
    """Write live output to this process's own stdout / stderr (works in Jupyter).

    Bytes go to the binary buffer beneath when there is one (a real file),
    else they are shown decoded (a notebook's stream takes only text).
    """
    target = sys.stderr if stream == "stderr" else sys.stdout
    if isinstance(data, str):
        target.write(data)
    else:
        buffer = getattr(target, "buffer", None)
        if buffer is None:
            target.write(data.decode("utf-8", "replace"))
        else:
            target.flush()
            buffer.write(data)
            buffer.flush()
            return
    target.flush()


def fan_out(*sinks: OnOutput | None) -> OnOutput | None:
    """One deliver function calling every given sink, in order; None when there is none."""
    active = [sink for sink in sinks if sink is not None]
    if not active:
        return None
    if len(active) == 1:
        return active[0]

    def deliver(stream: str, data: Any) -> None:
        for sink in active:
            sink(stream, data)

    return deliver


class LiveOutput:
    """Output waiting for ``Process.output()``: bounded, never blocking the follower."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._items: collections.deque[tuple[str, Any]] = collections.deque()
        self._size = 0
        self._ended = False
        self._ready = threading.Condition()

    def put(self, stream: str, data: Any) -> None:
        with self._ready:
            self._items.append((stream, data))
            self._size += len(data)
            while self._size > self._limit and len(self._items) > 1:
                self._size -= len(self._items.popleft()[1])
            self._ready.notify_all()

    def end(self) -> None:
        with self._ready:
            self._ended = True
            self._ready.notify_all()

    def drain(self) -> Iterator[tuple[str, Any]]:
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._items or self._ended)
                if not self._items:
                    return
                item = self._items.popleft()
                self._size -= len(item[1])
            yield item
