"""pytest fixtures for code that uses CreateOS sandboxes, and a check that none leaks.

The machinery of the plugin that ``createos_sync_pytest`` (the ``pytest11``
entry point, which imports only pytest) declares: its options, marker,
hooks and fixture declarations are there, and this module is imported only
once a collected test uses one of the fixtures. Nothing runs, starts or is
sent otherwise.

- ``createos_emulator`` (session): a running local ``Emulator``.
- ``createos_client`` (session): with ``--createos=local`` (the default) a
  client of ``createos_emulator``, and for the session ``CREATEOS_API_URL``
  and ``CREATEOS_API_KEY`` point at the emulator too, so that code under test
  that builds its own client (``cs.lease()``) uses it; with
  ``--createos=live`` a ``Client()`` of the real service, from the environment.
- ``createos_lease`` (function): an open lease on ``createos_client``, closed
  after the test (options from ``@pytest.mark.createos_lease(...)``); a
  ``CreateosCleanupError`` at close fails the test with its class and message.

The leak check: when a collected test uses one of the fixtures, every lease
opened in the session from then on is recorded. At the end (the teardown of
the session fixtures, while the emulator still runs), leases still open and
sandboxes they created that are still alive are closed and destroyed (a leak
in a live run costs money), then reported in a "createos leak check" section
naming them and the tests that opened them, and the session fails. The
report is the session's, not the last test's (which would be blamed for
another's leak if the check failed a fixture teardown); pytest-xdist workers
send theirs to the controller. ``--createos-leak-check=off`` turns it off.

pytest-xdist: each worker process starts its own emulator. It starts in
milliseconds, keeps every worker's sandboxes and processes apart (a test
that counts them sees its own), and needs no coordination between workers;
the real service is shared by nature, and its request budget is the
machine's (every worker's client paces with the others).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import attrs
import pytest

from createos_sync_pytest import LEAKS, WATCH

from .client import Client, client_for
from .config import API_KEY_ENVS, BASE_URL_ENVS, Config
from .errors import ConfigError, CreateosCleanupError, CreateosError
from .lease import _registry

if TYPE_CHECKING:
    from .emulator import Emulator
    from .lease import Lease
    from .lease._core import LeaseCore

LOCAL_BUDGET = 1_000_000  # the plugin's emulator has no rate limit: nothing to pace


def createos_emulator(pytestconfig: pytest.Config) -> Iterator[Emulator]:
    """A local CreateOS emulator for the session (its own in each xdist worker)."""
    try:
        from .emulator import Emulator
    except ImportError as exc:
        pytest.fail(
            f"createos_emulator needs the emulator extra: pip install 'createos-sync[emulator]' "
            f"({exc})",
            pytrace=False,
        )
    with Emulator(rate_limit=None) as emulator:
        yield emulator
        _check_leaks(pytestconfig)


def createos_client(
    pytestconfig: pytest.Config, request: pytest.FixtureRequest
) -> Iterator[Client]:
    """A client of the emulator (``--createos=local``) or of the real service (``live``)."""
    if pytestconfig.getoption("createos") == "live":
        try:
            client = Client()
        except ConfigError as exc:
            pytest.fail(f"--createos=live: {exc}", pytrace=False)
        with client:
            yield client
            _check_leaks(pytestconfig)
        return
    emulator: Emulator = request.getfixturevalue("createos_emulator")
    with pytest.MonkeyPatch.context() as patch:
        # Both families of names: the official clients read CREATEOS_SANDBOX_*.
        for name in BASE_URL_ENVS:
            patch.setenv(name, emulator.url)
        for name in API_KEY_ENVS:
            patch.setenv(name, emulator.api_key)
        with emulator.client(requests_per_minute=LOCAL_BUDGET, rate_scope="process") as client:
            yield client
            _check_leaks(pytestconfig)


def createos_lease(createos_client: Client, request: pytest.FixtureRequest) -> Iterator[Lease]:
    """An open lease on ``createos_client``, closed after the test."""
    marker = request.node.get_closest_marker("createos_lease")
    lease = createos_client.lease(**(marker.kwargs if marker is not None else {}))
    with _cleanup_errors_fail():
        lease.open()
    yield lease
    with _cleanup_errors_fail():
        lease.close()


@contextlib.contextmanager
def _cleanup_errors_fail() -> Iterator[None]:
    """A ``CreateosCleanupError`` fails the test with its class and message, as pytest
    shows an exception (the class is what users search for), without the traceback."""
    try:
        yield
    except CreateosCleanupError as exc:
        pytest.fail(f"createos_lease: {type(exc).__name__}: {exc}", pytrace=False)


@attrs.frozen
class Opened:
    """A lease opened during the session, and the test that opened it."""

    lease: LeaseCore
    test: str
    sandbox_id: str | None
    created: bool
    config: Config


class LeakWatch:
    """Records the leases opened from now on; ``check`` reports and cleans up leaks."""

    def __init__(self) -> None:
        self.opened: list[Opened] = []
        self.checked = False
        self.stop = _registry.watch(self._record)

    def _record(self, lease: LeaseCore) -> None:
        current = os.environ.get("PYTEST_CURRENT_TEST", "outside any test")
        self.opened.append(
            Opened(
                lease=lease,
                test=current.rsplit(" (", 1)[0],
                sandbox_id=lease.id,
                created=lease.options.creates,
                config=lease.client.config,
            )
        )

    def check(self) -> list[str]:
        """What leaked (closed or destroyed now), one line each; empty if nothing did."""
        self.checked = True
        problems = []
        for opened in self.opened:
            if not opened.lease.closed:
                problems.append(f"lease on sandbox {opened.sandbox_id} still open ({opened.test})")
                try:
                    opened.lease.close()
                except CreateosError as exc:
                    problems.append(f"  and closing it failed: {exc}")
        for opened, status in self._alive():
            problems.append(
                f"sandbox {opened.sandbox_id} still {status} after its lease closed ({opened.test})"
            )
            try:
                with client_for(opened.config) as client:
                    client.destroy(opened.sandbox_id or "")
            except CreateosError as exc:
                problems.append(f"  and destroying it failed: {exc}")
        return problems

    def _alive(self) -> list[tuple[Opened, str]]:
        """Sandboxes created in the session and still listed: one listing per service."""
        created: dict[Config, list[Opened]] = {}
        for opened in self.opened:
            if opened.created and opened.sandbox_id is not None:
                created.setdefault(opened.config, []).append(opened)
        alive = []
        for config, leases in created.items():
            try:
                with client_for(config) as client:
                    listed = {s.id: s.status for s in client.sandboxes()}
            except CreateosError as exc:
                listed = {o.sandbox_id or "": f"unchecked ({exc})" for o in leases}
            for opened in leases:
                status = listed.get(opened.sandbox_id or "")
                if status is not None and status not in ("destroying", "destroyed"):
                    alive.append((opened, status))
        return alive


def _check_leaks(config: pytest.Config) -> None:
    """Run the leak check once, at the first createos session fixture's teardown."""
    watch = config.stash.get(WATCH, None)
    if watch is not None and not watch.checked:
        config.stash.setdefault(LEAKS, []).extend(watch.check())
