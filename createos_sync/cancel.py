"""Cancelling a ``run()`` from another thread (an event loop cancelling a sample, say).

A blocked socket read cannot be interrupted by a flag: ``Cancel.set()`` also
calls what the run registered with ``waking`` (it cuts the output stream it
reads, as the run's deadline would), so the run wakes at once, ends the
command as its timeout would, and raises ``RunCancelled``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

Wake = Callable[[], None]


class Cancel:
    """A token that cancels the ``run()`` it is given to, from any thread.

    ``box.run(cmd, cancel=token)`` in one thread, ``token.set()`` in
    another: the command's whole process tree is ended and confirmed (else
    its session is terminated, else the lease is poisoned, as for a
    timeout), then the run raises ``RunCancelled``. One token may serve
    several runs; once set, it stays set, and each run given it raises at
    once (before any request).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = False
        self._wakers: list[Wake] = []

    def set(self) -> None:
        """Cancel: the runs given this token end their commands and raise."""
        with self._lock:  # held while waking: once ``waking`` has left, no wake runs
            if self._set:
                return
            self._set = True
            for wake in self._wakers:
                wake()

    def is_set(self) -> bool:
        return self._set

    @contextlib.contextmanager
    def waking(self, wake: Wake) -> Iterator[None]:
        """Call ``wake`` when the token is set meanwhile (at once if it already is).

        A reader checks ``is_set()`` after it arms what ``wake`` cuts and
        before it blocks: a ``set()`` that came earlier is seen by the check,
        a later one cuts what was armed.
        """
        with self._lock:
            already = self._set
            if not already:
                self._wakers.append(wake)
        try:
            if already:
                wake()
            yield
        finally:
            with self._lock, contextlib.suppress(ValueError):
                self._wakers.remove(wake)

    def __repr__(self) -> str:
        return f"Cancel(set={self._set})"
