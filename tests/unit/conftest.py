from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import responses

from createos_sync import Client, Lease
from createos_sync._commands.session import SWITCH as SESSION_SWITCH

from .wire import BASE, KEY, Service


@pytest.fixture(autouse=True)
def _managed_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests script the managed-process path's requests (create, connect,
    stdin/close): no command session (tests/integration/test_session.py covers that)."""
    monkeypatch.setenv(SESSION_SWITCH, "0")


@pytest.fixture
def mock() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock(assert_all_requests_are_fired=True) as rsps:
        yield rsps


@pytest.fixture
def service(mock: responses.RequestsMock) -> Service:
    return Service(mock)


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def client(sleeps: list[float]) -> Iterator[Client]:
    # A huge request budget keeps the shared pacer out of wire tests; it is tested on its own.
    with Client(KEY, BASE, requests_per_minute=10**9, sleep=sleeps.append) as c:
        yield c


@pytest.fixture
def box_sandbox() -> dict[str, Any] | None:
    """The sandbox record ``box`` opens on (None: a running one); a module overrides it."""
    return None


@pytest.fixture
def box_options() -> dict[str, Any]:
    """The options of ``box``'s lease; a module overrides them."""
    return {}


@pytest.fixture
def box(
    client: Client,
    service: Service,
    box_sandbox: dict[str, Any] | None,
    box_options: dict[str, Any],
) -> Iterator[Lease]:
    """The unit tier's open lease: its creation (and ttl watchdog) and its destroy at the end,
    if the test left it open, are not the test's requests."""
    service.create_sandbox(body=box_sandbox)
    if box_options.get("ttl", ...) is not None:
        service.watchdog()
    lease = client.lease(**box_options).open()
    yield lease
    if not lease.closed:
        service.close(lease)
