"""Ready-made progress displays for ``progress=True`` on file transfers.

On a terminal and in a Jupyter notebook a transfer gets a ``tqdm`` bar
(a widget in a notebook when ipywidgets is installed, text otherwise, without
tqdm's warning that the widget is missing). tqdm is the ecosystem's standard
there: it knows terminals, notebooks and their redraw rules, so a bar looks
like every other bar the user sees. Anywhere else (a log file, a pipe, CI) a bar would be a mess of
carriage returns, so a plain line is written at each quarter and at the end.

Both are ``progress(done_bytes, total_bytes)`` callables with a ``close()``;
a transfer that starts again (a retry) starts the display again.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Protocol, TextIO

if TYPE_CHECKING:
    from collections.abc import Callable

MB = 1024 * 1024


class Display(Protocol):
    def __call__(self, done: int, total: int | None) -> None: ...

    def close(self, *, complete: bool = True) -> None:
        """The transfer is over: it ``complete``d, or failed (nothing more is claimed)."""


def display(label: str, stream: TextIO | None = None) -> Display:
    """A bar on a terminal or in a notebook, plain lines elsewhere; writes to ``stream``
    (default: ``sys.stderr``)."""
    stream = stream if stream is not None else sys.stderr
    if interactive(stream):
        return Bar(label, stream)
    return Lines(label, stream)


def interactive(stream: TextIO) -> bool:
    """Whether a bar can be drawn on ``stream``: a terminal, or a Jupyter kernel's stream."""
    return _in_notebook(stream) or _is_terminal(stream)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _in_notebook(stream: TextIO) -> bool:
    # A Jupyter kernel replaces sys.stderr with its own stream class.
    return type(stream).__module__.startswith("ipykernel")


class Bar:
    """A tqdm bar, created on the first call (tqdm is imported only then)."""

    def __init__(self, label: str, stream: TextIO) -> None:
        self._label = label
        self._stream = stream
        self._bar: Any = None

    def __call__(self, done: int, total: int | None) -> None:
        if self._bar is None:
            self._bar = tqdm_class(self._stream)(
                total=total,
                desc=self._label,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                file=self._stream,
                dynamic_ncols=True,
                leave=True,
            )
        elif done < self._bar.n or total != self._bar.total:  # the transfer started again
            self._bar.reset(total=total)
        self._bar.update(done - self._bar.n)

    def close(self, *, complete: bool = True) -> None:
        if self._bar is not None:  # a failed transfer's bar stays where it stopped
            self._bar.close()


def tqdm_class(stream: TextIO) -> Callable[..., Any]:
    """The tqdm bar for ``stream``, imported when a bar is drawn: most runs never need it.

    In a notebook, tqdm's widget needs ipywidgets; without it ``tqdm.auto``
    warns (``TqdmWarning: IProgress not found``) and draws text, so text is
    chosen here first, quietly.
    """
    if _in_notebook(stream) and _widgets():
        from tqdm.notebook import tqdm as widget

        return widget
    from tqdm.std import tqdm

    return tqdm


def _widgets() -> bool:
    """Whether tqdm can draw its notebook widget (``tqdm.notebook`` imported ipywidgets)."""
    from tqdm import notebook

    return getattr(notebook, "IProgress", None) is not None


class Lines:
    """One line per quarter of a known size, and one at the end; no carriage returns."""

    def __init__(self, label: str, stream: TextIO) -> None:
        self._label = label
        self._stream = stream
        self._shown = -1  # the last quarter written (4 = complete)
        self._done = 0
        self._total: int | None = None

    def __call__(self, done: int, total: int | None) -> None:
        if done < self._done:
            self._shown = -1  # the transfer started again
        self._done, self._total = done, total
        if not total:
            return
        quarter = min(4, 4 * done // total)
        if quarter > self._shown and quarter > 0:
            self._shown = quarter
            self._write(f"{25 * quarter}% of {_size(total)}")

    def close(self, *, complete: bool = True) -> None:
        if self._shown == 4 or not complete:
            return
        if self._total is None:
            self._write(_size(self._done))
        elif self._done >= self._total:
            self._write(f"100% of {_size(self._total)}")

    def _write(self, text: str) -> None:
        self._stream.write(f"{self._label}: {text}\n")
        self._stream.flush()


def _size(count: int) -> str:
    return f"{count / MB:.1f} MB" if count >= MB / 10 else f"{count} bytes"
