from __future__ import annotations

from collections.abc import Iterator

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
def box(client: Client, service: Service) -> Iterator[Lease]:
    """An open lease on a running sandbox; closed without its destroy (tests assert their own)."""
    service.open_running()
    lease = client.lease().open()
    yield lease
    lease._finish_close()
