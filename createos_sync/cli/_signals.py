"""Termination signals as interrupts, so that a killed CLI still cleans up like ``close()``.

Python turns SIGINT into ``KeyboardInterrupt``, and the SDK answers that by
terminating the remote process tree and closing the lease (a second one
skips to destroying the sandbox). SIGTERM and SIGHUP would otherwise end the
interpreter on the spot and leave the sandbox running; raised as
``Interrupted`` (a ``KeyboardInterrupt``), they take the same path.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A termination signal received while the CLI was working."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """Within the block, SIGINT, SIGTERM and SIGHUP raise ``Interrupted``; restored after.

    Signals that were ignored when the block began stay ignored.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    previous = {}
    try:
        for signum in HANDLED:
            # An ignored signal stays ignored: `nohup`, and SIGINT in a shell's background job.
            if signal.getsignal(signum) is not signal.SIG_IGN:
                previous[signum] = signal.signal(signum, _raise)
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def exit_status(interrupt: KeyboardInterrupt) -> int:
    """The shell's convention: 128 + the signal number (130 for Ctrl-C)."""
    signum = interrupt.signum if isinstance(interrupt, Interrupted) else signal.SIGINT
    return 128 + int(signum)
