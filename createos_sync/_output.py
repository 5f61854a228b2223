"""Where decoded output goes: bounded capture, the user's callback, live echo."""

from __future__ import annotations

import sys
from collections.abc import Callable

OnOutput = Callable[[str, str], None]


class TailBuffer:
    """Keeps the last ``limit`` characters written, in amortised linear time."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.truncated = False
        self._chunks: list[str] = []
        self._size = 0

    def write(self, text: str) -> None:
        self._chunks.append(text)
        self._size += len(text)
        # Compact only when twice over the limit, so each character is copied O(1) times.
        if self._size > 2 * self.limit + 65536:
            self._compact()

    def getvalue(self) -> str:
        self._compact()
        return self._chunks[0] if self._chunks else ""

    def _compact(self) -> None:
        text = "".join(self._chunks)
        if len(text) > self.limit:
            text = text[len(text) - self.limit :]
            self.truncated = True
        self._chunks = [text] if text else []
        self._size = len(text)


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
