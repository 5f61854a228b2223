"""Helpers of the reliability suite: its key, deadlines, naps, leak and secret checks.

Fixtures and hooks stay in conftest.py; tests import these from here.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
import traceback
from collections.abc import Iterable

from createos_sync.emulator import Emulator

from ..integration.helpers import idle_session, sweep
from .ledger import LEDGER

# Distinctive, so that a leak of it anywhere is found by a plain substring search.
KEY = f"sk-reliability-{secrets.token_hex(12)}"
# Every short deadline of the suite; the answers slowed by faults come later than this.
SHORT = 1.0
SLOW = 1.8
NAP_CAP = 0.05
# Property-based tests run ``examples(n)`` examples: n by default, more for a deep run.
FUZZ_FACTOR = int(os.environ.get("CREATEOS_FUZZ_FACTOR", "1"))


def examples(n: int) -> int:
    return n * FUZZ_FACTOR


class Nap:
    """A client's ``sleep``: records each wait, sleeps at most ``cap`` seconds of it.

    Retries and reconnections run without their real backoff, yet a poll loop
    cannot spin hot against the emulator.
    """

    def __init__(self, cap: float = NAP_CAP) -> None:
        self.cap = cap
        self.waits: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, seconds: float) -> None:
        with self._lock:
            self.waits.append(seconds)
        time.sleep(min(seconds, self.cap))


# --- leaks -------------------------------------------------------------------------


def check_no_leaks(emulator: Emulator, before: set[str], allowed: Iterable[str] = ()) -> list[str]:
    """The sandboxes of ``emulator`` that appeared since ``before`` and are not in
    ``allowed`` (a cleanup error named those); all are destroyed. Each leaked sandbox
    and each process still running counts as a leak in the ledger."""
    leaked = sorted(set(emulator.live_sandboxes()) - before - set(allowed))
    running = [p for p in emulator.live_processes() if not idle_session(emulator, p)]
    LEDGER.add(leaks=len(leaked) + len(running))  # an idle command session is the lease's
    sweep(emulator, before)
    return leaked


def same_digest(got: str, want: str, what: str) -> None:
    """Assert two SHA-256 digests match; a mismatch is counted as output lost or duplicated."""
    if got != want:
        LEDGER.add(lost=1)
    assert got == want, f"{what}: the bytes differ from what was sent"


# --- secrets -----------------------------------------------------------------------


def exception_texts(exc: BaseException | None) -> list[str]:
    """Everything a user or a logging handler can see of an exception: the displayed
    traceback (causes and contexts as Python prints them, notes included) and the
    str and repr of each exception of that chain."""
    if exc is None:
        return []
    texts = ["".join(traceback.format_exception(type(exc), exc, exc.__traceback__))]
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        texts += [str(current), repr(current), repr(current.args)]
        texts += [str(n) for n in getattr(current, "__notes__", ())]
        if current.__cause__ is not None:
            current = current.__cause__
        elif not current.__suppress_context__:
            current = current.__context__
        else:
            current = None
    return texts


_FORMATTER = logging.Formatter("%(levelname)s %(name)s %(message)s")


def record_texts(records: Iterable[logging.LogRecord], *, ours: bool = True) -> list[str]:
    """Formatted log records (with tracebacks) of this package's loggers, or of the others.

    Only ``createos_sync`` loggers promise never to show a query string;
    urllib3's DEBUG lines show request lines (paths and queries, never headers).
    """
    return [_FORMATTER.format(r) for r in records if r.name.startswith("createos_sync") == ours]


def assert_no_secrets(texts: list[str], secrets_: Iterable[str]) -> None:
    """None of ``secrets_`` appears in any of ``texts``."""
    LEDGER.add(texts_scanned=len(texts))
    found = [(s, t) for t in texts for s in secrets_ if s and s in t]
    LEDGER.add(secrets_found=len(found))
    assert not found, f"secret {found[0][0]!r} appeared in: {found[0][1][:2000]}"
