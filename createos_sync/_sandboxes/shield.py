"""Interrupts held back during bookkeeping, and let through while waiting on the network.

Ctrl-C raises ``KeyboardInterrupt`` between any two bytecodes. Landing in
the middle of the bookkeeping around a creation (the answer has arrived but
is not recorded yet; a failed ``open()`` is deciding what to destroy, or is
attaching the note that names what it could not destroy), it would make the
package lose track of a sandbox. So that code runs ``held()``: SIGINT (and
SIGTERM or SIGHUP, when a Python handler turns them into exceptions, as the
CLI does) is recorded instead of acted upon, and delivered through its own
handler when the block ends. Inside it, ``delivered()`` wraps what may
take long (a request, a wait), where a signal acts at once as usual (one
held meanwhile is delivered on entry), so that Ctrl-C still stops a slow
``open()`` at once.

Signals only ever interrupt the main thread, and only it may set handlers:
in any other thread both blocks do nothing. A held interrupt that is
delivered while an exception propagates carries that exception's cleanup
notes (and a note of it, if it is a ``CreateosCleanupError``), so that what
names a sandbox is never lost.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

from ..errors import CreateosCleanupError, add_note, attach_cleanup_failure

HANDLED = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)

# Main-thread state: the stack of modes, the handlers replaced while holding, and the
# signals received meanwhile.
_modes: list[_Mode] = []
_saved: dict[int, Callable[[int, FrameType | None], Any]] = {}
_pending: list[int] = []


def _hold(signum: int, frame: FrameType | None) -> None:
    _pending.append(signum)


def _install() -> None:
    for signum in HANDLED:
        handler = signal.getsignal(signum)
        if callable(handler) and handler is not _hold:  # a Python handler: it would raise
            _saved[signum] = handler
            signal.signal(signum, _hold)


def _restore() -> None:
    while _saved:
        signum, handler = _saved.popitem()
        signal.signal(signum, handler)


def _deliver(propagating: BaseException | None) -> None:
    """Send each held signal again, now that its own handler is back."""
    held, _pending[:] = list(_pending), []
    for signum in held:
        try:
            signal.raise_signal(signum)
        except BaseException as raised:
            if propagating is not None and raised is not propagating:
                _carry_notes(propagating, raised)
            raise


def _carry_notes(source: BaseException, target: BaseException) -> None:
    if isinstance(source, CreateosCleanupError):  # the failure itself names the sandbox
        attach_cleanup_failure(target, source)
    for note in getattr(source, "__notes__", ()):
        add_note(target, note)
    failures = source.__dict__.get("_createos_cleanup_errors")
    if failures:
        target.__dict__.setdefault("_createos_cleanup_errors", []).extend(failures)


def _apply(propagating: BaseException | None) -> None:
    """Make the handlers match the innermost mode."""
    hold = bool(_modes) and _modes[-1].hold
    if hold and not _saved:
        _install()
    elif not hold and _saved:
        _restore()
        _deliver(propagating)


class _Mode:
    def __init__(self, hold: bool) -> None:
        self.hold = hold
        self._active = False

    def __enter__(self) -> None:
        main = threading.current_thread() is threading.main_thread()
        if not main or not (self.hold or _modes):
            return  # delivered() outside held() changes nothing
        try:
            _modes.append(self)
            _apply(None)
        except BaseException:
            if _modes and _modes[-1] is self:  # (an interrupt may land before the append)
                _modes.pop()  # a held signal was delivered on entry: the block does not run
            _apply(None)
            raise
        self._active = True

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._active:
            self._active = False
            _modes.pop()
            try:
                _apply(exc)
            except BaseException as raised:
                # A signal landing as the handlers come back (not only one held meanwhile)
                # still carries what names a sandbox.
                if exc is not None and raised is not exc:
                    _carry_notes(exc, raised)
                raise


def held() -> _Mode:
    """Within the block, interrupts wait until it ends (except inside ``delivered()``)."""
    return _Mode(hold=True)


def delivered() -> _Mode:
    """Within ``held()``, let interrupts act again for this block (a request, a wait)."""
    return _Mode(hold=False)
