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
  (see ``_sandboxes.journal``). Threads of one process take a thread lock first, since
  record locks belong to the process.
- A holder that lives but does not let go (stopped with SIGSTOP, a
  debugger) is found out once per process: the lock is waited for at most
  ``patience`` seconds counted from the first attempt that found it busy,
  however many threads or calls wait meanwhile, and never past the caller's
  own bound. Then the record is *stalled* for this process (``RecordBusy``
  with ``detected`` set once, so that the caller warns once): every send
  makes one attempt that does not wait, and paces alone while it fails.
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

from ..config import lock_record, private_dir, private_file

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no record locks, callers pace per process
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("createos_sync.pacer")

SLOTS = 120
LOCK_PATIENCE = 5.0
IDLE_RECORD_SECONDS = 86400.0  # a record untouched this long is removed (``prune``)
DIRECTORY = "rate"
SUFFIX = ".budget"

_MAGIC = b"CSRB"
_VERSION = 1
_HEADER = struct.Struct("<4sHHd")  # magic, version, ring size, bucket width (seconds)
_TRAILER = struct.Struct("<I")  # CRC-32 of everything before it
_RING = SLOTS + 1
_SIZE = _HEADER.size + _RING * (8 + 4) + _TRAILER.size


class _Local:
    """This process's side of one record: the thread lock, and what it knows of a stall."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # record locks belong to the process: threads queue here
        self.busy_since: float | None = None  # the first attempt that found the lock held
        self.stalled = False  # found held past the patience, and not had since


_locals: dict[str, _Local] = {}
_locals_guard = threading.Lock()


def _reset_after_fork() -> None:
    global _locals, _locals_guard
    _locals, _locals_guard = {}, threading.Lock()  # a parent thread may have held one


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


class RecordBusy(Exception):
    """Another live process holds the record's lock: pace this send alone.

    ``detected`` is True for the one call that found the stall (the caller
    warns once); False while a stall found earlier goes on, or when the
    caller's own bound ran out first (its deadline: no stall found yet).
    """

    def __init__(self, path: Path, *, detected: bool = False) -> None:
        super().__init__(str(path))
        self.detected = detected


def record_path(directory: Path, base_url: str, window: float) -> Path:
    """Where the record for one service (and window length) lives."""
    digest = hashlib.sha256(f"{base_url} {window!r}".encode()).hexdigest()[:24]
    return directory / DIRECTORY / f"{digest}{SUFFIX}"


def prune(directory: Path, *, idle: float = IDLE_RECORD_SECONDS) -> int:
    """Remove the records of ``directory`` untouched for ``idle`` seconds; how many.

    Every base URL has a record, and a local emulator's URL has a port of its
    own each time, so records would pile up. One idle for a day holds no send
    of the last window: removing it loses nothing (a send racing the removal
    starts a fresh record). Errors are ignored: this is housekeeping.
    """
    removed = 0
    cutoff = time.time() - idle
    try:
        entries = list(os.scandir(directory / DIRECTORY))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.endswith(SUFFIX):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                os.unlink(entry.path)
                removed += 1
        except OSError:
            continue
    return removed


class BudgetRecord:
    """The shared window of one service: ``take`` counts a send or says how long to wait."""

    def __init__(self, path: Path, window: float, *, patience: float = LOCK_PATIENCE) -> None:
        self.path = path
        self.window = window
        self.width = window / SLOTS
        self.patience = patience
        self._key = str(path)

    def take(self, limit: int, clock: Callable[[], float], *, bound: float | None = None) -> float:
        """Count one send now if fewer than ``limit`` are in the window: 0.0; else the wait.

        ``bound``: the longest this call may wait for the lock (the caller's
        deadline); the patience applies whatever it is.

        Raises:
            RecordBusy: another live process holds the lock (see the module's notes).
            OSError: the record cannot be created, read or written.
        """
        local = self._local()
        if not local.lock.acquire(timeout=self._patience(local, bound)):
            raise RecordBusy(self.path)  # another thread waits for the record: it finds out
        try:
            return self._take_locked(local, limit, clock, bound)
        finally:
            local.lock.release()

    def _take_locked(
        self, local: _Local, limit: int, clock: Callable[[], float], bound: float | None
    ) -> float:
        """``take`` with the thread lock held: the record lock, then the count."""
        patience = self._patience(local, bound)
        if local.busy_since is None:
            local.busy_since = time.monotonic()  # kept only if this attempt finds it held
        locked = _LockedFile(self.path, patience)
        try:
            fd = locked.__enter__()
        except RecordBusy:
            now = time.monotonic()
            found = local.stalled or now - local.busy_since >= self.patience - 1e-3
            if not found:
                raise  # the caller's bound ran out first: pace this one send alone
            detected, local.stalled = not local.stalled, True
            raise RecordBusy(self.path, detected=detected) from None
        except BaseException:
            local.busy_since = None
            raise
        if local.stalled:
            log.info("the request budget record %s is free again", self.path)
        local.busy_since, local.stalled = None, False
        try:
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
        finally:
            locked.__exit__()

    def _patience(self, local: _Local, bound: float | None) -> float:
        """How long the next lock attempt may wait: what is left of the patience (no
        wait once a stall was found), and never past ``bound``."""
        if local.stalled:
            patience = 0.0
        elif local.busy_since is None:
            patience = self.patience
        else:
            patience = local.busy_since + self.patience - time.monotonic()
        if bound is not None:
            patience = min(patience, bound)
        return max(patience, 0.0)

    def _wait(self, live: list[tuple[int, int]], limit: int, now: float) -> float:
        """Seconds until enough of the oldest buckets leave the window to admit one send."""
        excess = sum(count for _, count in live) - limit + 1
        for bucket, count in live:
            excess -= count
            if excess <= 0:
                return max((bucket + SLOTS + 1) * self.width - now, 1e-3)
        raise AssertionError("unreachable: the live buckets hold more than the excess")

    def _local(self) -> _Local:
        with _locals_guard:
            local = _locals.get(self._key)
            if local is None:
                local = _locals[self._key] = _Local()
            return local

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
        if not lock_record(self._fd, self._patience):  # a holder keeps it for microseconds
            raise RecordBusy(self._path)

    def __exit__(self, *exc_info: object) -> None:
        os.close(self._fd)  # closing drops the record lock
