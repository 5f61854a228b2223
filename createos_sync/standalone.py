"""Where the CLI finds a standalone emulator: a record that ``createos-sync emulator`` keeps.

While it serves, the standalone emulator writes its URL and key (and its
CA, with ``--tls``) to ``emulator.json`` in the state directory (the lease
journal's, mode 0600), and removes it when it stops. ``--local`` commands
use it, and ``createos-sync emulator --env`` prints it as ``export`` lines
for another shell. A record whose process is gone is ignored.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from collections.abc import Iterator
from pathlib import Path

import attrs

from .config import API_KEY_ENV, CA_BUNDLE_ENV, private_dir, private_file, state_dir

RECORD = "emulator.json"
URL_ENV = "CREATEOS_API_URL"


@attrs.frozen
class Standalone:
    """A running standalone emulator, as its record says."""

    url: str
    api_key: str = attrs.field(repr=False)
    ca_bundle: str | None
    pid: int

    def exports(self) -> str:
        """Shell lines that point ``createos-sync`` and ``cs.Client()`` at it."""
        names = {URL_ENV: self.url, API_KEY_ENV: self.api_key}
        if self.ca_bundle is not None:
            names[CA_BUNDLE_ENV] = self.ca_bundle
        return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in names.items())


def record_path() -> Path:
    return state_dir() / RECORD


@contextlib.contextmanager
def announced(url: str, api_key: str, ca_bundle: str | None) -> Iterator[Path]:
    """Write this process's record for the length of the block; remove it after, if still ours.

    OSError: the state directory cannot be written (the caller says so and serves on).
    """
    path = private_dir(state_dir()) / RECORD
    data = {"url": url, "api_key": api_key, "ca_bundle": ca_bundle, "pid": os.getpid()}
    part = path.with_name(f".{RECORD}.{os.getpid()}")
    fd = private_file(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "w") as out:
        json.dump(data, out)
    os.replace(part, path)
    try:
        yield path
    finally:
        found = _read(path)
        if found is not None and found.pid == os.getpid():
            with contextlib.suppress(OSError):
                path.unlink()


def find() -> Standalone | None:
    """The standalone emulator that still runs, per its record; None if none does."""
    found = _read(record_path())
    return found if found is not None and _alive(found.pid) else None


def _read(path: Path) -> Standalone | None:
    try:
        data = json.loads(path.read_text())
        return Standalone(
            url=str(data["url"]),
            api_key=str(data["api_key"]),
            ca_bundle=None if data.get("ca_bundle") is None else str(data["ca_bundle"]),
            pid=int(data["pid"]),
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
