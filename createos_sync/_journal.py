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

The lock is a POSIX record lock (``lockf``) plus a lock for this process's
threads, not ``flock``: a ``flock`` is shared with every child forked while
it is held (multiprocessing, say), and stays held as long as that child
lives, which would block every other writer until the child exits.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

log = logging.getLogger("createos_sync.journal")

STATE_DIR_ENV = "CREATEOS_SYNC_STATE_DIR"
FILE_NAME = "leases.json"

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


def state_dir() -> Path:
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return Path(base) / "createos-sync"


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


class Journal:
    """The journal file; every method is one locked read-modify-write."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory if directory is not None else state_dir()
        self.path = self.directory / FILE_NAME

    def add(self, entry: Entry) -> None:
        self._update(lambda entries: [*(e for e in entries if e.name != entry.name), entry])

    def set_sandbox(self, name: str, sandbox_id: str) -> None:
        self._update(
            lambda entries: [
                attrs.evolve(e, sandbox_id=sandbox_id) if e.name == name else e for e in entries
            ]
        )

    def remove(self, name: str) -> None:
        self._update(lambda entries: [e for e in entries if e.name != name])

    def entries(self) -> list[Entry]:
        with self._locked():
            return self._read()

    def _update(self, change: Callable[[list[Entry]], list[Entry]]) -> None:
        try:
            with self._locked():
                self._write(change(self._read()))
        except OSError as exc:
            log.warning("the lease journal at %s could not be updated: %s", self.path, exc)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        with _threads, open(self.directory / (FILE_NAME + ".lock"), "a") as lock:
            if fcntl is not None:
                fcntl.lockf(lock, fcntl.LOCK_EX)
            yield

    def _read(self) -> list[Entry]:
        try:
            document = json.loads(self.path.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            log.warning(
                "the lease journal at %s is unreadable (%s); starting afresh", self.path, exc
            )
            return []
        items = document.get("leases") if isinstance(document, dict) else None
        entries = []
        for item in items if isinstance(items, list) else []:
            with contextlib.suppress(TypeError, ValueError):
                entries.append(_entry(item))
        return entries

    def _write(self, entries: list[Entry]) -> None:
        document = {"version": 1, "leases": [attrs.asdict(e) for e in entries]}
        fd, temporary = tempfile.mkstemp(dir=self.directory, prefix=".leases.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(document, handle, indent=1)
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


def _entry(item: Any) -> Entry:
    if not isinstance(item, dict):
        raise TypeError("not an entry")
    known = {field.name for field in attrs.fields(Entry)}
    return Entry(**{key: value for key, value in item.items() if key in known})
