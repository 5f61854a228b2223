"""Fixtures for the emulator's own tests: live Emulators, checked for leftovers at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from createos_sync.emulator import Emulator

from .helpers import Api, bwrap_works


def start(**kwargs: Any) -> Emulator:
    kwargs.setdefault("rate_limit", None)
    kwargs.setdefault("heartbeat_interval", 0.2)
    return Emulator(**kwargs).start()


@pytest.fixture
def make_emu() -> Iterator[Callable[..., Emulator]]:
    """Start emulators with chosen options; each is closed and checked for leftovers."""
    started: list[Emulator] = []

    def make(**kwargs: Any) -> Emulator:
        emu = start(**kwargs)
        started.append(emu)
        return emu

    yield make
    for emu in started:
        emu.close()
        assert emu.live_processes() == []


@pytest.fixture
def emu(make_emu: Callable[..., Emulator]) -> Emulator:
    return make_emu()


@pytest.fixture
def api(emu: Emulator) -> Api:
    return Api(emu)


@pytest.fixture(params=["none", "bwrap"])
def any_api(request: pytest.FixtureRequest, make_emu: Callable[..., Emulator]) -> Api:
    """An Api over each isolation mode (bwrap skipped where it does not work)."""
    if request.param == "bwrap" and not bwrap_works():
        pytest.skip("bubblewrap does not work here")
    return Api(make_emu(isolation=request.param))


@pytest.fixture
def bwrap_api(make_emu: Callable[..., Emulator]) -> Api:
    emu = make_emu()
    if emu.isolation != "bwrap":
        pytest.skip("bubblewrap does not work here")
    return Api(emu)


@pytest.fixture
def official(emu: Emulator) -> Iterator[Any]:
    """The official client (``createos-sandbox``), driven unchanged against ``emu``."""
    createos = pytest.importorskip("createos")
    with createos.Client(api_key=emu.api_key, base_url=emu.url, timeout=30.0) as client:
        yield client
