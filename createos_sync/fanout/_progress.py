"""``cs.map``'s progress display: a bar on a terminal or in a notebook, plain lines elsewhere.

No thread of ours draws it: ``cs.map``'s coordinating loop calls ``show``
when an item finishes and at least every ``refresh`` seconds, so elapsed time
and rate stay current while items run. The bar is tqdm's: text on a
terminal, a widget in Jupyter (the ecosystem's standard there) when ipywidgets
is installed, chosen as for file transfers (``tqdm_class``).
Written to a file or a CI log, a self-overwriting bar would be noise, so
``progress=True`` there prints a plain line every ``PLAIN_EVERY`` seconds and
one at the end.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from .._files._progress import interactive, tqdm_class

PLAIN_EVERY = 10.0
LABEL = "cs.map"


class Progress:
    """Counts items done, failed and running; draws them as ``mode`` says.

    ``mode``: None draws a bar on a terminal or in a notebook and nothing
    elsewhere; True draws always (plain lines when not a terminal); False never.
    ``waiting``: the seconds left of a wait for the request budget under way
    (the pacer's ``waiting``), shown while there is one.
    """

    def __init__(
        self,
        mode: bool | None,
        total: int | None,
        stream: TextIO | None = None,
        *,
        waiting: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._waiting = waiting
        self._total = total
        self._started = time.monotonic()
        self._last_plain = self._started
        self._finished = 0
        self.done = self.failed = self.running = 0
        drawn = interactive(self._stream)
        self._bar: Any = None
        self._plain = bool(mode) and not drawn
        if mode is not False and drawn:
            self._bar = _tqdm_bar(total, self._stream)

    @property
    def refresh(self) -> float | None:
        """How often the caller should call ``show`` while nothing finishes (None: no need)."""
        if self._bar is not None:
            return 1.0
        return PLAIN_EVERY if self._plain else None

    def show(self) -> None:
        if self._bar is not None:
            finished = self.done + self.failed
            postfix = f"failed={self.failed} running={self.running}{self._budget(' ')}"
            self._bar.set_postfix_str(postfix, refresh=False)
            self._bar.update(finished - self._finished)  # redraws, with elapsed and rate
            self._finished = finished
            self._bar.refresh()
        elif self._plain and time.monotonic() - self._last_plain >= PLAIN_EVERY:
            self._print_line()

    def close(self) -> None:
        if self._bar is not None:
            self.show()
            self._bar.close()
        elif self._plain:
            self._print_line()

    def _print_line(self) -> None:
        self._last_plain = now = time.monotonic()
        elapsed = now - self._started
        finished = self.done + self.failed
        of = f"/{self._total}" if self._total is not None else ""
        rate = finished / elapsed if elapsed > 0 else 0.0
        print(
            f"{LABEL}: {finished}{of} finished ({self.done} done, {self.failed} failed), "
            f"{self.running} running, {elapsed:.0f}s elapsed, {rate:.2f} items/s"
            f"{self._budget(', ')}",
            file=self._stream,
            flush=True,
        )

    def _budget(self, separator: str) -> str:
        """The wait for the request budget under way, if any, in words."""
        seconds = self._waiting()
        if seconds <= 0:
            return ""
        return f"{separator}waiting {seconds:.0f} s for the request budget"


def _tqdm_bar(total: int | None, stream: TextIO) -> Any:
    bar = tqdm_class(stream)
    return bar(total=total, desc=LABEL, unit="item", file=stream, dynamic_ncols=True)
