"""The standalone emulators' records: one each, the newest used, a dead one's pruned."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from createos_sync import standalone as _standalone


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CREATEOS_SYNC_STATE_DIR", str(tmp_path))
    return tmp_path


def record(state: Path, pid: int, url: str, started: float) -> Path:
    directory = state / "emulators"
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / f"{pid}.json"
    data = {"url": url, "api_key": "k", "ca_bundle": None, "pid": pid, "started": started}
    path.write_text(json.dumps(data))
    return path


def test_the_newest_serving_is_used_and_the_others_are_named(state: Path) -> None:
    with _standalone.announced("http://127.0.0.1:1", "k-1", None) as mine:
        older = record(state, os.getppid(), "http://127.0.0.1:2", time.time() - 60)
        dead = record(state, 2**22 + 7, "http://127.0.0.1:3", time.time() + 60)
        found = _standalone.find()
        assert found is not None and found.url == "http://127.0.0.1:1"
        assert [r.url for r in _standalone.serving()] == [
            "http://127.0.0.1:1",
            "http://127.0.0.1:2",
        ]
        note = _standalone.choice_note(found)
        assert note is not None and note.startswith("2 emulators serve: using the newest")
        assert not dead.exists()  # a dead emulator's record is pruned
    assert not mine.exists() and older.exists()  # only its own record is removed
    alone = _standalone.find()
    assert alone is not None and alone.url == "http://127.0.0.1:2"
    assert _standalone.choice_note(alone) is None
