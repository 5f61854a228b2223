"""The machine's request budget: one small record per service, shared by every local process.

CreateOS counts requests per caller IP, so every process of a machine
(pytest-xdist workers, ``multiprocessing`` pools, parallel CI steps) draws on
one budget. Each process keeping its own window would let N processes send N
times the limit; this record is the window they share.

Shape: the window is cut into ``SLOTS`` buckets of ``window / SLOTS``
seconds, and the record keeps how many sends each of the last ``SLOTS + 1``
buckets saw. A send is admitted while the buckets that overlap the last
``window`` seconds hold fewer than the limit: this over-counts by at most one
bucket (a wait at most ``window / SLOTS`` longer than an exact log would ask)
but never under-counts, and the record keeps a fixed size (about 1.5 KB)
whatever the limit, so a read-modify-write costs the same at 300 or 10**6
requests per minute.

Times are ``time.monotonic()``, which on Linux and macOS is one clock for the
whole machine (so processes agree) and never jumps with the wall clock.
Buckets from the future (a record written before a reboot) are ignored and
overwritten as their slots come round.

Robustness, each case a test:

- The record is read and rewritten in place under a POSIX record lock
  (``lockf``) taken on the file itself. The kernel drops such a lock when its
  holder dies, SIGKILL included, so a dead holder never blocks anyone; unlike
  ``flock``, the lock is not inherited by a child forked while it is held
  (see ``_journal``). Threads of one process take a thread lock first, since
  record locks belong to the process.
- A holder that lives but does not let go (stopped with SIGSTOP, say) is
  waited for at most ``patience`` seconds, then ``RecordBusy`` is raised: the
  caller paces itself alone for a while rather than block forever.
- A missing, truncated or corrupt record (checked by magic, size and CRC) is
  started afresh.
- A state directory that cannot be written raises ``OSError``: the caller
  falls back to its own in-process window.

The file is opened for each send and closed after it: closing any descriptor
of a file drops every record lock the process holds on it, so a descriptor
kept open across calls would be a trap, and an open costs microseconds.
"""

from __future__ import annotations

import array
import hashlib
import logging
import math
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from ..config import private_dir, private_file

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no record locks, callers pace per process
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("createos_sync.pacer")

SLOTS = 120
LOCK_PATIENCE = 5.0
DIRECTORY = "rate"

_MAGIC = b"CSRB"
_VERSION = 1
_HEADER = struct.Struct("<4sHHd")  # magic, version, ring size, bucket width (seconds)
_TRAILER = struct.Struct("<I")  # CRC-32 of everything before it
_RING = SLOTS + 1
_SIZE = _HEADER.size + _RING * (8 + 4) + _TRAILER.size

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _reset_after_fork() -> None:
    global _locks, _locks_guard
    _locks, _locks_guard = {}, threading.Lock()  # a parent thread may have held one


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


class RecordBusy(Exception):
    """Another live process held the record's lock for longer than the patience allows."""


def record_path(directory: Path, base_url: str, window: float) -> Path:
    """Where the record for one service (and window length) lives."""
    digest = hashlib.sha256(f"{base_url} {window!r}".encode()).hexdigest()[:24]
    return directory / DIRECTORY / f"{digest}.budget"


class BudgetRecord:
    """The shared window of one service: ``take`` counts a send or says how long to wait."""

    def __init__(self, path: Path, window: float, *, patience: float = LOCK_PATIENCE) -> None:
        self.path = path
        self.window = window
        self.width = window / SLOTS
        self.patience = patience
        self._key = str(path)

    def take(self, limit: int, clock: Callable[[], float]) -> float:
        """Count one send now if fewer than ``limit`` are in the window: 0.0; else the wait.

        Raises:
            RecordBusy: the lock stayed held by a live process past the patience.
            OSError: the record cannot be created, read or written.
        """
        with self._thread_lock(), self._locked() as fd:
            now = clock()
            buckets, counts, intact = self._read(fd)
            current = math.floor(now / self.width)
            live = [
                (bucket, count)
                for bucket, count in zip(buckets, counts, strict=True)
                if current - SLOTS <= bucket <= current and count
            ]
            if sum(count for _, count in live) < limit:
                slot = current % _RING
                if buckets[slot] != current:
                    buckets[slot], counts[slot] = current, 0
                counts[slot] += 1
                if os.pwrite(fd, self._encode(buckets, counts), 0) != _SIZE:
                    raise OSError("short write to the request budget record")
                if not intact:
                    os.ftruncate(fd, _SIZE)  # a damaged record may have been longer
                return 0.0
            return self._wait(sorted(live), limit, now)

    def _wait(self, live: list[tuple[int, int]], limit: int, now: float) -> float:
        """Seconds until enough of the oldest buckets leave the window to admit one send."""
        excess = sum(count for _, count in live) - limit + 1
        for bucket, count in live:
            excess -= count
            if excess <= 0:
                return max((bucket + SLOTS + 1) * self.width - now, 1e-3)
        raise AssertionError("unreachable: the live buckets hold more than the excess")

    def _thread_lock(self) -> threading.Lock:
        with _locks_guard:
            return _locks.setdefault(self._key, threading.Lock())

    def _locked(self) -> _LockedFile:
        return _LockedFile(self.path, self.patience)

    def _read(self, fd: int) -> tuple[array.array[int], array.array[int], bool]:
        """The record's buckets and counts (empty ones if missing or damaged), and if intact."""
        raw = os.pread(fd, _SIZE + 1, 0)
        decoded = self._decode(raw) if raw else None
        if decoded is None:
            if raw:
                log.warning("the request budget record %s was corrupt: starting afresh", self.path)
            return array.array("q", [-1] * _RING), array.array("I", [0] * _RING), False
        return (*decoded, True)

    def _decode(self, raw: bytes) -> tuple[array.array[int], array.array[int]] | None:
        if len(raw) != _SIZE:
            return None
        (crc,) = _TRAILER.unpack_from(raw, _SIZE - _TRAILER.size)
        if zlib.crc32(raw[: -_TRAILER.size]) != crc:
            return None
        magic, version, ring, width = _HEADER.unpack_from(raw)
        if (magic, version, ring, width) != (_MAGIC, _VERSION, _RING, self.width):
            return None
        start = _HEADER.size
        buckets = array.array("q", raw[start : start + 8 * _RING])
        counts = array.array("I", raw[start + 8 * _RING : _SIZE - _TRAILER.size])
        return buckets, counts

    def _encode(self, buckets: array.array[int], counts: array.array[int]) -> bytes:
        body = _HEADER.pack(_MAGIC, _VERSION, _RING, self.width) + buckets.tobytes()
        body += counts.tobytes()
        return body + _TRAILER.pack(zlib.crc32(body))


class _LockedFile:
    """The record's file, open and locked for one read-modify-write (a context manager)."""

    def __init__(self, path: Path, patience: float) -> None:
        self._path = path
        self._patience = patience
        self._fd = -1

    def __enter__(self) -> int:
        if fcntl is None:  # pragma: no cover - Windows
            raise OSError("record locks are not available on this platform")
        try:
            self._fd = private_file(self._path, os.O_RDWR | os.O_CREAT)
        except FileNotFoundError:
            private_dir(self._path.parent)
            self._fd = private_file(self._path, os.O_RDWR | os.O_CREAT)
        try:
            self._lock()
        except BaseException:
            os.close(self._fd)
            raise
        return self._fd

    def _lock(self) -> None:
        # Non-blocking attempts with short naps: a blocking lockf could wait forever on
        # a holder that is alive but stopped. Contention is rare and short (a holder
        # keeps the lock for tens of microseconds), so the first try nearly always wins.
        give_up = time.monotonic() + self._patience
        nap = 50e-6
        while True:
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except (BlockingIOError, PermissionError):  # EAGAIN / EACCES: held elsewhere
                if time.monotonic() >= give_up:
                    raise RecordBusy(str(self._path)) from None
                time.sleep(nap)
                nap = min(nap * 2, 5e-3)

    def __exit__(self, *exc_info: object) -> None:
        os.close(self._fd)  # closing drops the record lock
