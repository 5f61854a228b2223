"""The pytest entry point of ``createos-sync`` (``pytest11``): it loads nothing until used.

Every pytest run of an environment where ``createos-sync`` is installed loads
this module; importing the SDK (requests, urllib3, attrs, tenacity and the
package itself) cost 0.7 to 1.5 s on each of them. So this module, outside
the ``createos_sync`` package, imports only pytest: it adds the options and
the marker, declares the fixtures, and imports the plugin's machinery
(``createos_sync.pytest_plugin``) when a collected test uses one of the
fixtures, or a fixture runs. Its hooks read and write the session's stash
only. What the fixtures do and the leak check: ``createos_sync.pytest_plugin``.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from createos_sync import Client, Lease
    from createos_sync.emulator import Emulator
    from createos_sync.pytest_plugin import LeakWatch

FIXTURES = frozenset({"createos_emulator", "createos_client", "createos_lease"})
WATCH: pytest.StashKey[LeakWatch] = pytest.StashKey()
LEAKS: pytest.StashKey[list[str]] = pytest.StashKey()
WORKER_OUTPUT = "createos_leaks"


def _machinery() -> ModuleType:
    """The plugin's machinery: the SDK is imported from here on, and only here."""
    from createos_sync import pytest_plugin

    return pytest_plugin


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("createos", "CreateOS sandboxes (createos-sync)")
    group.addoption(
        "--createos",
        choices=("local", "live"),
        default="local",
        help="where createos_client's sandboxes run: a local emulator (default) or the "
        "real service (live: CREATEOS_API_KEY and friends from the environment)",
    )
    group.addoption(
        "--createos-leak-check",
        choices=("on", "off"),
        default="on",
        help="report leases left open and sandboxes left alive at the end of the session",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "createos_lease(**options): lease options of the createos_lease fixture"
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.getoption("createos_leak_check") == "off":
        return
    if any(FIXTURES & set(getattr(item, "fixturenames", ())) for item in session.items):
        session.config.stash[WATCH] = _machinery().LeakWatch()


def pytest_unconfigure(config: pytest.Config) -> None:
    watch = config.stash.get(WATCH, None)
    if watch is not None:
        watch.stop()


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent where xdist is
def pytest_testnodedown(node: object, error: object) -> None:
    """pytest-xdist's controller: a worker finished; keep the leaks it found."""
    found = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT)
    config = getattr(node, "config", None)
    if found and isinstance(config, pytest.Config):
        config.stash.setdefault(LEAKS, []).extend(found)


def pytest_sessionfinish(session: pytest.Session) -> None:
    leaks = session.config.stash.get(LEAKS, [])
    output = getattr(session.config, "workeroutput", None)
    if output is not None:  # an xdist worker: the controller reports
        output[WORKER_OUTPUT] = leaks
    elif leaks and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    leaks = config.stash.get(LEAKS, [])
    if leaks and getattr(config, "workeroutput", None) is None:
        terminalreporter.section("createos leak check", red=True)
        terminalreporter.write_line(
            "leases or sandboxes outlived the session (now closed and destroyed; "
            "--createos-leak-check=off to disable):"
        )
        for line in leaks:
            terminalreporter.write_line("  " + line, red=True)


@pytest.fixture(scope="session")
def createos_emulator(pytestconfig: pytest.Config) -> Iterator[Emulator]:
    """A local CreateOS emulator for the session (its own in each xdist worker)."""
    yield from _machinery().createos_emulator(pytestconfig)


@pytest.fixture(scope="session")
def createos_client(
    pytestconfig: pytest.Config, request: pytest.FixtureRequest
) -> Iterator[Client]:
    """A client of the emulator (``--createos=local``) or of the real service (``live``)."""
    yield from _machinery().createos_client(pytestconfig, request)


@pytest.fixture
def createos_lease(createos_client: Client, request: pytest.FixtureRequest) -> Iterator[Lease]:
    """An open lease on ``createos_client``, closed after the test."""
    yield from _machinery().createos_lease(createos_client, request)
