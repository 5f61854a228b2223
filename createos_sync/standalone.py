"""Where the CLI finds a standalone emulator: the records that ``createos-sync emulator`` keeps.

While it serves, each standalone emulator writes its URL and key (and its
CA, with ``--tls``) to a record of its own, ``emulators/<pid>.json`` in the
state directory (the lease journal's, mode 0600), and removes it when it
stops. Several may serve at once: ``--local`` commands and
``createos-sync emulator --env`` use the newest, and say so when there are
several; when it stops, the next newest serves again. A record whose
process is gone is ignored.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import time
from collections.abc import Iterator
from pathlib import Path

import attrs

from .config import (
    API_KEY_ENVS,
    BASE_URL_ENVS,
    CA_BUNDLE_ENV,
    private_dir,
    private_file,
    state_dir,
)

RECORDS = "emulators"


@attrs.frozen
class Standalone:
    """A running standalone emulator, as its record says."""

    url: str
    api_key: str = attrs.field(repr=False)
    ca_bundle: str | None
    pid: int
    started: float = 0.0

    def describe(self) -> str:
        return f"{self.url} (pid {self.pid})"

    def exports(self) -> str:
        """Shell lines that point ``createos-sync``, ``cs.Client()`` and the official clients
        at it (both families of names: else a client reading the other would send the
        emulator's key to the public service)."""
        names = dict.fromkeys(BASE_URL_ENVS, self.url) | dict.fromkeys(API_KEY_ENVS, self.api_key)
        if self.ca_bundle is not None:
            names[CA_BUNDLE_ENV] = self.ca_bundle
        return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in names.items())


def records_dir() -> Path:
    return state_dir() / RECORDS


@contextlib.contextmanager
def announced(url: str, api_key: str, ca_bundle: str | None) -> Iterator[Path]:
    """Write this process's record for the length of the block; remove it after.

    Another emulator's record is never touched: each has its own file.
    OSError: the state directory cannot be written (the caller says so and serves on).
    """
    directory = private_dir(private_dir(state_dir()) / RECORDS)
    path = directory / f"{os.getpid()}.json"
    data = {
        "url": url,
        "api_key": api_key,
        "ca_bundle": ca_bundle,
        "pid": os.getpid(),
        "started": time.time(),
    }
    part = directory / f".{os.getpid()}.part"
    fd = private_file(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "w") as out:
        json.dump(data, out)
    os.replace(part, path)
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


def serving() -> list[Standalone]:
    """Every standalone emulator that still runs, per its record; the newest first."""
    try:
        paths = sorted(records_dir().glob("*.json"))
    except OSError:
        return []
    alive = []
    for path in paths:
        record = _read(path)
        if record is not None and _alive(record.pid):
            alive.append(record)
        elif record is not None:  # a killed emulator's: its pid could be reused one day
            with contextlib.suppress(OSError):
                path.unlink()
    return sorted(alive, key=lambda record: (record.started, record.pid), reverse=True)


def find() -> Standalone | None:
    """The standalone emulator ``--local`` uses: the newest that still runs; None if none."""
    found = serving()
    return found[0] if found else None


def choice_note(found: Standalone) -> str | None:
    """What to say about using ``found`` when several emulators serve (None when it is alone)."""
    others = [record for record in serving() if record.pid != found.pid]
    if not others:
        return None
    listed = ", ".join(record.describe() for record in others)
    return (
        f"{len(others) + 1} emulators serve: using the newest, {found.describe()}; "
        f"also serving: {listed} (stop the newest to use the next)"
    )


def _read(path: Path) -> Standalone | None:
    try:
        data = json.loads(path.read_text())
        return Standalone(
            url=str(data["url"]),
            api_key=str(data["api_key"]),
            ca_bundle=None if data.get("ca_bundle") is None else str(data["ca_bundle"]),
            pid=int(data["pid"]),
            started=float(data.get("started", 0.0)),
        )
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive, though not ours to use
        return True
    return True
