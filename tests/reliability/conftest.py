"""Fixtures and hooks of the reliability suite; its helpers are in ``support.py``.

The ledger counts what the suite proved (fault scenarios, runs, bytes compared
by checksum, leaks and losses found; ``ledger.py``) and the suite prints it at
the end of the run, so that RELIABILITY.md publishes figures from an actual run. Tests marked
``soak`` are deselected unless ``-m`` names them (or ``CREATEOS_SOAK=1``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from .ledger import LEDGER, Ledger


@pytest.fixture(scope="session")
def ledger() -> Ledger:
    return LEDGER


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Soak tests run only when asked for: ``-m soak`` or ``CREATEOS_SOAK=1``."""
    if "soak" in (config.getoption("markexpr") or "") or os.environ.get("CREATEOS_SOAK") == "1":
        return
    here = os.path.dirname(__file__)
    soak = [i for i in items if i.get_closest_marker("soak") and str(i.path).startswith(here)]
    if soak:
        config.hook.pytest_deselected(items=soak)
        items[:] = [i for i in items if i not in soak]


# --- isolation -------------------------------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def _isolated_for_wider_fixtures(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The suite-wide isolation (tests/conftest.py) is per test; module fixtures here open
    leases before it applies, so they get the same: no CREATEOS_* setting of the developer's,
    and a lease journal of their own."""
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith("CREATEOS_") and name != "CREATEOS_SOAK":
                patch.delenv(name)
        patch.setenv("CREATEOS_SYNC_STATE_DIR", str(tmp_path_factory.mktemp("module-state")))
        yield
