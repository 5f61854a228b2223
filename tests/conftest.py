"""Suite-wide isolation: no test reads the developer's CreateOS settings or state."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from .reliability.ledger import LEDGER

try:  # the test extra has it; a tier run in an environment of its own may not
    from hypothesis import settings
except ImportError:  # pragma: no cover
    pass
else:
    # One profile for the whole suite: no per-example deadline (a loaded 2-core CI machine
    # can take a second over an example that takes a millisecond alone); tests bound time
    # by what they do, not by how fast the machine is.
    settings.register_profile("createos", deadline=None)
    settings.load_profile("createos")


def pytest_configure(config: pytest.Config) -> None:
    """Undo ignored SIGINT / SIGHUP (a background job or nohup starts us so).

    Ignored signals are inherited through exec, so the scripts and CLI runs
    that tests interrupt on purpose would never see them.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.fixture(autouse=True)
def _isolated_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("CREATEOS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CREATEOS_SYNC_STATE_DIR", str(tmp_path_factory.mktemp("state")))
    # Tests leave dead owners' entries on purpose: no lease reaps them behind a test's back
    # (tests/integration/test_reap.py turns it on where that is what is tested).
    monkeypatch.setenv("CREATEOS_SYNC_AUTO_REAP", "off")
    yield


# --- the reliability ledger, summed over pytest-xdist workers -------------------------------


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the counts to the controller
        workeroutput["reliability_ledger"] = LEDGER.counts()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    counts = getattr(node, "workeroutput", {}).get("reliability_ledger")
    if counts:
        LEDGER.add(**counts)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if LEDGER.scenarios or LEDGER.runs or LEDGER.texts_scanned:
        terminalreporter.section("reliability ledger")
        for line in LEDGER.lines():
            terminalreporter.write_line(line)
