"""Shared helpers of the end-to-end tests: waiting, request logs, emulators of their own."""

from __future__ import annotations

import contextlib
import hashlib
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests

from createos_sync._commands.session import SESSION_ARGV0
from createos_sync._sandboxes.watchdog import NAME as WATCHDOG_NAME
from createos_sync.emulator import Emulator

# High enough that the interpreter-wide pacer never slows a test; pacing has its own tests.
FAST = 1_000_000

# Writes N lines of multi-byte UTF-8 (2-, 3- and 4-byte characters), every third to
# stderr, in the interpreter's own buffer sizes, so that frames split characters.
MIXED_OUTPUT_SCRIPT = """\
import sys
out, err = sys.stdout.buffer, sys.stderr.buffer
for i in range(int(sys.argv[1])):
    line = ("%07d \\u00fc\\u20ac\\U0001d11e " % i).encode("utf-8") * 8 + b"\\n"
    (err if i % 3 == 0 else out).write(line)
"""
MIXED_LINE_BYTES = 145


def operations(emulator: Emulator, sandbox_id: str | None = None) -> list[tuple[str, int | None]]:
    """(operation, status) of each logged request, optionally only those naming a sandbox."""
    return [
        (r.operation or "?", r.status)
        for r in emulator.request_log
        if sandbox_id is None or f"/sandboxes/{sandbox_id}" in r.path
    ]


def processes_of(
    emulator: Emulator, sandbox_id: str | None, *, watchdog: bool = False
) -> list[Any]:
    """The live processes the emulator's kernel view still finds in one sandbox.

    The lease's own ttl watchdog is left out unless ``watchdog`` is true: it
    runs for as long as the lease is open, and is not a process of the user's.
    """
    found = [p for p in emulator.live_processes() if p.sandbox_id == sandbox_id]
    found = [p for p in found if not idle_session(emulator, p)]
    return found if watchdog else [p for p in found if not is_watchdog(emulator, p)]


def idle_session(emulator: Emulator, live: Any) -> bool:
    """Whether a live process is a lease's command session with no command's process in it
    (none of its processes carries a command's env marker): the lease's, not the user's."""
    if not _named(emulator, live, SESSION_ARGV0):
        return False
    for pid in live.pids:
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if b"CREATEOS_SYNC_RUN=" in environ.read():
                    return False
        except OSError:
            continue
    return True


def user_processes(emulator: Emulator) -> list[Any]:
    """The live processes of every sandbox, the leases' ttl watchdogs left out."""
    return [
        p
        for p in emulator.live_processes()
        if not is_watchdog(emulator, p) and not idle_session(emulator, p)
    ]


def is_watchdog(emulator: Emulator, live: Any) -> bool:
    """Whether a live process is a lease's ttl watchdog (its args name it)."""
    return _named(emulator, live, WATCHDOG_NAME)


def _named(emulator: Emulator, live: Any, name: str) -> bool:
    try:
        process = emulator._require_store().get(live.sandbox_id).processes[live.process_id]
    except Exception:  # its sandbox or record is gone meanwhile
        return False
    return process.command.args[2:3] == [name]


def proc_state(pid: int) -> str | None:
    """The one-letter state of a host process from /proc (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()[0]


class UrlRecorder:
    """A ``requests.Session`` whose answers are recorded (method, path, query, status).

    Passed to ``Client(session=...)``: it observes the real wire without patching the SDK.
    """

    def __init__(self) -> None:
        self.session = requests.Session()
        self.seen: list[tuple[str, str, dict[str, list[str]], int]] = []
        self.sandbox_states: list[str] = []
        self.session.hooks["response"].append(self._record)

    def _record(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        parts = urlsplit(response.request.url or "")
        method = response.request.method or "?"
        self.seen.append((method, parts.path, parse_qs(parts.query), response.status_code))
        # Only sandbox creations and reads are parsed: reading a stream here would consume it.
        creation = method == "POST" and parts.path == "/v1/sandboxes"
        read = method == "GET" and re.fullmatch(r"/v1/sandboxes/[^/]+", parts.path)
        if (creation or read) and response.ok:
            self.sandbox_states.append(response.json()["data"]["status"])

    def queries(self, path_suffix: str) -> list[dict[str, list[str]]]:
        return [query for _, path, query, _ in self.seen if path.endswith(path_suffix)]


@contextlib.contextmanager
def own_emulator(**options: Any) -> Iterator[Emulator]:
    """An extra emulator (small journal, instant transitions...), checked for leaks at the end."""
    options.setdefault("rate_limit", None)
    with Emulator(**options) as emu, no_new_leaks(emu):
        yield emu


def sweep(emulator: Emulator, before: Iterable[str] = ()) -> list[str]:
    """Destroy the sandboxes of ``emulator`` that appeared since ``before``; their ids, sorted."""
    left = sorted(set(emulator.live_sandboxes()) - set(before))
    with emulator.client(requests_per_minute=FAST) as janitor:
        for sandbox_id in left:
            janitor.destroy(sandbox_id)
    return left


@contextlib.contextmanager
def no_new_leaks(emulator: Emulator) -> Iterator[None]:
    """Fail if the block leaves a sandbox or a process of ``emulator`` behind.

    The leaked sandboxes are destroyed first, so that one leak does not fail later tests.
    """
    before = set(emulator.live_sandboxes())
    yield
    leaked = sweep(emulator, before)
    assert not leaked, f"sandboxes leaked: {leaked}"
    assert emulator.live_processes() == []


def mixed_output(lines: int) -> tuple[bytes, bytes]:
    """What ``MIXED_OUTPUT_SCRIPT`` writes, computed by running it locally."""
    done = subprocess.run(
        [sys.executable, "-c", MIXED_OUTPUT_SCRIPT, str(lines)],
        capture_output=True,
        check=True,
        timeout=60,
    )
    return done.stdout, done.stderr


def sha256(data: bytes | str) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


class StreamHasher:
    """An ``on_output`` callback that hashes everything it is given, per stream."""

    def __init__(self) -> None:
        self.hashes = {"stdout": hashlib.sha256(), "stderr": hashlib.sha256()}
        self.chars = {"stdout": 0, "stderr": 0}

    def __call__(self, stream: str, text: str) -> None:
        self.hashes[stream].update(text.encode("utf-8"))
        self.chars[stream] += len(text)

    def digest(self, stream: str) -> str:
        return self.hashes[stream].hexdigest()
