"""A wait for the request budget is never silent: the CLI says it on stderr, once a wait."""

from __future__ import annotations

import re
import time
from pathlib import Path

from createos_sync._wire.budget import BudgetRecord, record_path
from createos_sync._wire.pacer import WINDOW_SECONDS
from createos_sync.config import normalize_base_url
from createos_sync.emulator import Emulator

from .subprocesses import CLI, emulator_env, finish, spawn

FREE_IN = 8.0  # seconds until the filled budget admits a send: more than 2 once started


def _fill_the_budget(state: Path, url: str, limit: int = 300) -> None:
    """This machine sent ``limit`` requests to ``url`` long enough ago to free in FREE_IN s."""
    record = BudgetRecord(record_path(state, normalize_base_url(url), WINDOW_SECONDS), 61.0)
    sent_at = time.monotonic() - WINDOW_SECONDS + FREE_IN
    for _ in range(limit):
        assert record.take(limit, lambda: sent_at) == 0.0


def test_the_cli_says_on_stderr_when_it_waits_for_the_request_budget(
    emulator: Emulator, tmp_path: Path
) -> None:
    _fill_the_budget(tmp_path, emulator.url)
    env = emulator_env(emulator, CREATEOS_SYNC_STATE_DIR=str(tmp_path))
    status, out, err = finish(spawn([*CLI, "shapes"], env))
    assert "s-1vcpu-1gb" in out
    assert status == 0, err
    waits = re.findall(r"waiting (\d+) s for the request budget: 300 per minute on (\S+)", err)
    assert len(waits) == 1, err  # one line for the wait, however it is made of sleeps
    [(seconds, where)] = waits
    assert 2 <= int(seconds) <= FREE_IN + 1 and where == emulator.url
    assert err.startswith("createos-sync: waiting "), err
