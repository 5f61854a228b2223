"""The lease journal: a local record of every sandbox a lease creates, so none is ever lost.

A lease writes its entry before it asks for a sandbox (the unique name) and
again once the sandbox exists (its id); it removes the entry once the
sandbox is destroyed or deliberately kept. An entry whose owning process is
gone therefore names a sandbox that may be leaking: a creation whose reply
was lost, or a program killed before it could clean up. ``reap`` destroys
those. The journal holds names, ids, URLs and process ids, never a key.

The file lives in ``$CREATEOS_SYNC_STATE_DIR``, else
``$XDG_STATE_HOME/createos-sync``, else ``~/.local/state/createos-sync``.
Writers on one machine are serialised with a lock file; the journal is
rewritten atomically (temporary file, then rename).

Recording a sandbox before creating it is the crash-safety promise, so a
journal that cannot be written stops ``add`` (and with it the creation)
with ``ConfigError``, unless the user opted out (``journal=False``, or
``CREATEOS_SYNC_JOURNAL=off``). Nothing a human may need is ever dropped:
an entry that cannot be understood stays in the file as it is (``reap``
reports it), and a file that cannot be parsed is set aside under a
timestamped name beside it, its readable entries salvaged into a fresh
journal.

The lock is a POSIX record lock (``lockf``) plus a lock for this process's
threads, not ``flock``: a ``flock`` is shared with every child forked while
it is held (multiprocessing, say), and stays held as long as that child
lives, which would block every other writer until the child exits.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from .._wire.server_text import ID
from ..config import STATE_DIR_ENV, lock_record, new_beside, private_dir, private_file, state_dir
from ..errors import ConfigError

log = logging.getLogger("createos_sync.journal")

JOURNAL_ENV = "CREATEOS_SYNC_JOURNAL"
FILE_NAME = "leases.json"
SET_ASIDE_PREFIX = FILE_NAME + ".unreadable-"
# A live holder of the journal's lock for this long is stuck (stopped, deadlocked): give up.
LOCK_PATIENCE = 10.0
_OFF = frozenset({"off", "0", "false", "no"})
_ON = frozenset({"", "on", "1", "true", "yes"})
# A lease name cut off mid-entry in a damaged file: enough to look the sandbox up.
_PARTIAL_NAME = re.compile(r'"name"\s*:\s*"([A-Za-z0-9][A-Za-z0-9._:-]{0,127})"')
_PARTIAL_ID = re.compile(r'"sandbox_id"\s*:\s*"([A-Za-z0-9][A-Za-z0-9._:-]{0,127})"')

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: single-writer best effort
    fcntl = None  # type: ignore[assignment]

# Record locks belong to the process, not the thread: threads take this one too.
_threads = threading.Lock()


def _reset_after_fork() -> None:
    global _threads
    _threads = threading.Lock()  # a thread of the parent may have held it: it does not exist here


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``CREATEOS_SYNC_JOURNAL`` lets leases keep a journal (``off`` opts out)."""
    value = (os.environ if environ is None else environ).get(JOURNAL_ENV, "").strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ConfigError(f"{JOURNAL_ENV} must be 'on' or 'off'")


def _process_start(pid: int) -> str | None:
    """The kernel's start time of ``pid``: tells a live owner from a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


@attrs.frozen
class Entry:
    """One sandbox a lease of some local process created or is creating."""

    name: str
    base_url: str
    sandbox_id: str | None = None
    fork_from: str | None = None  # a fork's source: the service takes no name on a fork
    pid: int = attrs.field(factory=os.getpid)
    process_start: str | None = attrs.field(factory=lambda: _process_start(os.getpid()))
    host: str = attrs.field(factory=socket.gethostname)
    created_at: float = attrs.field(factory=time.time)

    def owner_alive(self) -> bool | None:
        """Whether the owning process still runs; None if that cannot be told from here."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        start = _process_start(self.pid)
        return start is None or self.process_start is None or start == self.process_start


@attrs.frozen
class Unreadable:
    """Something in the journal that could not be understood; it is kept for a human."""

    source: Path
    reason: str
    name: str | None = None
    sandbox_id: str | None = None


@attrs.frozen
class Survey:
    """Everything the journal holds: entries, and what could not be read (kept for a human)."""

    entries: list[Entry]
    unreadable: list[Unreadable]


@attrs.frozen
class _Document:
    entries: list[Entry]
    kept: list[Any]  # items that are not valid entries, written back untouched
    unreadable: list[Unreadable]


class Journal:
    """The journal file; every method is one locked read-modify-write."""

    def __init__(self, directory: Path | None = None, *, patience: float = LOCK_PATIENCE) -> None:
        self.directory = directory if directory is not None else state_dir()
        self.path = self.directory / FILE_NAME
        self.patience = patience  # seconds to wait for a lock held by a live process

    def add(self, entry: Entry) -> None:
        """Record a sandbox about to be created.

        Raises:
            ConfigError: the journal cannot be written: no sandbox may be created.
        """
        try:
            self._update(lambda entries: [*(e for e in entries if e.name != entry.name), entry])
        except OSError as exc:
            raise ConfigError(
                f"the lease journal in {self.directory} cannot be written "
                f"({type(exc).__name__}: {exc.strerror or exc}); a sandbox is only created once "
                f"it is recorded there. Make that directory writable, point {STATE_DIR_ENV} at "
                f"one that is, or opt out of the journal with journal=False (or {JOURNAL_ENV}=off)"
            ) from None

    def set_sandbox(self, name: str, sandbox_id: str) -> None:
        """Add the sandbox id to an entry (best effort: its name already finds the sandbox)."""
        self._try_update(
            lambda entries: [
                attrs.evolve(e, sandbox_id=sandbox_id) if e.name == name else e for e in entries
            ]
        )

    def remove(self, name: str) -> None:
        self._try_update(lambda entries: [e for e in entries if e.name != name])

    def entries(self) -> list[Entry]:
        """The entries that could be read."""
        with self._locked():
            return self._read().entries

    def survey(self) -> Survey:
        """The readable entries, and every entry or set-aside file that could not be read."""
        with self._locked():
            document = self._read()
            unreadable = [*document.unreadable, *self._set_aside_files()]
        return Survey(document.entries, unreadable)

    def _try_update(self, change: Callable[[list[Entry]], list[Entry]]) -> None:
        try:
            self._update(change)
        except OSError as exc:
            log.warning("the lease journal at %s could not be updated: %s", self.path, exc)

    def _update(self, change: Callable[[list[Entry]], list[Entry]]) -> None:
        with self._locked():
            document = self._read()
            self._write(change(document.entries), document.kept)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        private_dir(self.directory)
        lock_file = private_file(self.directory / (FILE_NAME + ".lock"), os.O_WRONLY | os.O_CREAT)
        with _threads, os.fdopen(lock_file, "w") as lock:
            if fcntl is not None:
                _wait_for_lock(lock.fileno(), self.patience)
            yield

    def _read(self) -> _Document:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return _Document([], [], [])
        if not raw.strip():
            return _Document([], [], [])  # nothing to lose
        try:
            document = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            return self._set_aside(raw, f"not JSON ({type(exc).__name__})")
        items = document.get("leases") if isinstance(document, dict) else None
        if not isinstance(items, list):
            return self._set_aside(raw, "not a journal document")
        return _sort(items, self.path)

    def _set_aside(self, raw: bytes, why: str) -> _Document:
        """Keep an unparseable file under a new name; salvage its readable entries."""
        document = _salvage(raw.decode("utf-8", "replace"), self.path)
        try:
            aside = self._keep_copy(raw)
            self._write(document.entries, document.kept)
        except OSError as exc:
            log.error(
                "the lease journal at %s is unreadable (%s) and could not be set aside (%s): "
                "it is left as it is",
                self.path,
                why,
                exc,
            )
            return document
        log.warning(
            "the lease journal at %s was unreadable (%s): it was set aside as %s, "
            "and %d readable entries were salvaged into a fresh journal",
            self.path,
            why,
            aside.name,
            len(document.entries) + len(document.kept),
        )
        return document

    def _keep_copy(self, raw: bytes) -> Path:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        for attempt in range(100):
            aside = self.directory / f"{SET_ASIDE_PREFIX}{stamp}{f'-{attempt}' if attempt else ''}"
            try:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
                with os.fdopen(private_file(aside, flags), "wb") as handle:
                    handle.write(raw)
                    handle.flush()
                    os.fsync(handle.fileno())
            except FileExistsError:
                continue
            return aside
        raise FileExistsError(f"no free name to set {self.path} aside")

    def _set_aside_files(self) -> list[Unreadable]:
        return [
            Unreadable(
                path,
                "an unreadable journal, set aside (its readable entries were salvaged into "
                f"{FILE_NAME}); check what it names with `createos-sync ls`, then delete it",
            )
            for path in sorted(self.directory.glob(SET_ASIDE_PREFIX + "*"))
        ]

    def _write(self, entries: list[Entry], kept: list[Any]) -> None:
        document = {"version": 1, "leases": [*(attrs.asdict(e) for e in entries), *kept]}
        fd, temporary = _new_private_file(self.directory)
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(document, handle, indent=1)
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


def _sort(items: list[Any], source: Path) -> _Document:
    """Split a journal's items into entries and items kept as they are (reported)."""
    entries, kept, unreadable = [], [], []
    for number, item in enumerate(items, 1):
        try:
            entries.append(_entry(item))
        except ValueError as exc:
            kept.append(item)
            unreadable.append(_describe_bad(item, number, str(exc), source))
    return _Document(entries, kept, unreadable)


def _describe_bad(item: Any, number: int, why: str, source: Path) -> Unreadable:
    fields = item if isinstance(item, dict) else {}
    name, sandbox_id = fields.get("name"), fields.get("sandbox_id")
    return Unreadable(
        source,
        f"entry {number} is unusable ({why}); it is kept: fix or remove it by hand",
        name=name if isinstance(name, str) and ID.match(name) else None,
        sandbox_id=sandbox_id if isinstance(sandbox_id, str) and ID.match(sandbox_id) else None,
    )


def _salvage(text: str, source: Path) -> _Document:
    """What a damaged journal still holds: its entries that read whole, and names cut off.

    Entries are flat JSON objects: every flat object naming a lease or a
    sandbox is taken; any text between them (a cut, garbage) is searched for
    the name and sandbox id of an entry it broke, which still find a sandbox.
    """
    decoder = json.JSONDecoder()
    items: list[Any] = []
    gaps, gap_start, position = [], 0, text.find("{")
    while position != -1:
        try:
            item, end = decoder.raw_decode(text, position)
        except ValueError:
            position = text.find("{", position + 1)
            continue
        if not (isinstance(item, dict) and _flat(item)):
            position = text.find("{", position + 1)  # a container: look inside it
            continue
        if {"name", "sandbox_id"} & item.keys():
            items.append(item)
            gaps.append(text[gap_start:position])
            gap_start = end
        position = text.find("{", end)
    gaps.append(text[gap_start:])
    for gap in gaps:
        names, ids = _PARTIAL_NAME.findall(gap), _PARTIAL_ID.findall(gap)
        sandbox_id = ids[0] if len(names) == len(ids) == 1 else None
        for name in names:  # an entry was cut: its name alone still finds its sandbox
            items.append({"name": name, "sandbox_id": sandbox_id, "cut_off": True})
    return _sort(items, source)


def _flat(item: dict[str, Any]) -> bool:
    return not any(isinstance(value, (dict, list)) for value in item.values())


def _text(value: object, what: str, *, pattern: re.Pattern[str] | None = None) -> str:
    if not isinstance(value, str) or not value or (pattern and not pattern.match(value)):
        raise ValueError(f"{what} is missing or malformed")
    return value


def _entry(item: Any) -> Entry:
    """An entry whose every field has the right type; ``ValueError`` says which does not."""
    if not isinstance(item, dict):
        raise ValueError("not an object")
    if item.get("cut_off"):
        raise ValueError("cut off in a damaged journal; only its name could be read")
    name = _text(item.get("name"), "name", pattern=ID)
    sandbox_id, pid = item.get("sandbox_id"), item.get("pid")
    if sandbox_id is not None:
        _text(sandbox_id, "sandbox_id", pattern=ID)
    fork_from = item.get("fork_from")
    if fork_from is not None:
        _text(fork_from, "fork_from", pattern=ID)
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise ValueError("pid is not a positive integer")
    start, created = item.get("process_start"), item.get("created_at", 0.0)
    if start is not None and not isinstance(start, str):
        raise ValueError("process_start is not a str")
    if isinstance(created, bool) or not isinstance(created, (int, float)):
        raise ValueError("created_at is not a number")
    return Entry(
        name=name,
        base_url=_text(item.get("base_url"), "base_url"),
        sandbox_id=sandbox_id,
        fork_from=fork_from,
        pid=pid,
        process_start=start,
        host=_text(item.get("host"), "host"),
        created_at=float(created),
    )


def _wait_for_lock(fd: int, patience: float) -> None:
    """Take the record lock, waiting at most ``patience`` seconds.

    A holder that died released it (the kernel drops record locks); one that
    is alive but stopped (SIGSTOP, a debugger) must not block every other
    process's ``open()`` and ``close()`` for ever: past the patience this is an
    ``OSError``, which ``add`` turns into a refusal to create and the other
    updates into a warning (the entry stays for ``reap``).
    """
    if not lock_record(fd, patience):
        raise BlockingIOError(
            errno.EAGAIN, f"its lock was held by another process for more than {patience:g} s"
        )


def _new_private_file(directory: Path) -> tuple[int, str]:
    """A new file only we can read, beside the journal, open for writing (as ``mkstemp``).

    Not ``tempfile``: its first use in a process takes a module lock outside the
    ``try`` that releases it, so a Ctrl-C landing there (a journal write lets
    interrupts act: see ``Record.add``) leaves the lock held, and the next write,
    the failed ``open()`` forgetting its entry, waited on it for ever, holding the
    journal's record lock, which then blocked every other process's leases too.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    path, fd = new_beside(str(directory / "leases"), ".tmp", lambda p: os.open(p, flags, 0o600))
    return fd, path
