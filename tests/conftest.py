"""Suite-wide isolation: no test reads the developer's CreateOS settings or state."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _isolated_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("CREATEOS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CREATEOS_SYNC_STATE_DIR", str(tmp_path_factory.mktemp("state")))
    yield
