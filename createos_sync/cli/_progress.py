"""A progress bar on stderr for ``run --upload`` / ``--download`` of more than a few MB."""

from __future__ import annotations

import sys
from typing import TextIO

THRESHOLD = 4 * 1024 * 1024  # smaller transfers finish before a bar would help
WIDTH = 30
MB = 1024 * 1024


class ProgressBar:
    """A ``progress(done, total)`` callback drawing one self-overwriting line on a terminal.

    Nothing is drawn when ``stream`` is not a terminal (logs stay clean) or
    before the transfer is known to exceed ``threshold`` bytes.
    """

    def __init__(
        self, label: str, stream: TextIO | None = None, threshold: int = THRESHOLD
    ) -> None:
        self._label = label
        self._stream = stream if stream is not None else sys.stderr
        self._threshold = threshold
        self._enabled = self._stream.isatty()
        self._drawn = False

    def __call__(self, done: int, total: int | None) -> None:
        if not self._enabled or max(done, total or 0) < self._threshold:
            return
        if total:
            filled = min(WIDTH, WIDTH * done // total)
            bar = f"[{'#' * filled}{' ' * (WIDTH - filled)}] {100 * done // total:3d}%"
            amount = f"{done / MB:.1f}/{total / MB:.1f} MB"
        else:
            bar, amount = "", f"{done / MB:.1f} MB"
        self._stream.write(f"\r{self._label} {bar} {amount}\033[K")
        self._stream.flush()
        self._drawn = True

    def close(self) -> None:
        """End the line, if one was drawn."""
        if self._drawn:
            self._stream.write("\n")
            self._stream.flush()
            self._drawn = False
