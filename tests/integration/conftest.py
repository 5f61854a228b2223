"""Integration fixtures: the SDK against the real emulator, over real HTTP, with real processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from createos_sync import Client, Lease
from createos_sync._commands.session import SWITCH as SESSION_SWITCH
from createos_sync.emulator import Emulator

from .helpers import FAST, no_new_leaks
from .subprocesses import emulator_env


@pytest.fixture(scope="session")
def emulator() -> Iterator[Emulator]:
    with Emulator(rate_limit=None) as emu:
        yield emu


@pytest.fixture(autouse=True)
def _nothing_leaks(emulator: Emulator) -> Iterator[None]:
    """Every integration test must leave no sandbox and no process behind."""
    emulator.faults.clear()
    with no_new_leaks(emulator):
        yield
        emulator.faults.clear()


@pytest.fixture
def client(emulator: Emulator) -> Iterator[Client]:
    with emulator.client(requests_per_minute=FAST) as c:
        yield c


@pytest.fixture
def box(client: Client) -> Iterator[Lease]:
    with client.lease() as lease:
        yield lease


@pytest.fixture
def managed_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands take the managed-process path (no command session): what a test of that
    path's own mechanics (start gate, staging, its request count) needs."""
    monkeypatch.setenv(SESSION_SWITCH, "0")


@pytest.fixture
def env(emulator: Emulator) -> dict[str, str]:
    """The environment of a CLI subprocess against the session emulator."""
    return emulator_env(emulator)
