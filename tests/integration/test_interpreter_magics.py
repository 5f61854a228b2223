"""``%load_ext createos_sync`` and ``%%createos`` under a real IPython shell, on the emulator."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from createos_sync.emulator import Emulator
from createos_sync.interpreter import CodeFailed

IPython = pytest.importorskip("IPython")


@pytest.fixture
def shell(emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from IPython.testing.globalipapp import get_ipython

    monkeypatch.setenv("CREATEOS_API_URL", emulator.url)
    monkeypatch.setenv("CREATEOS_API_KEY", emulator.api_key)
    ip = get_ipython()
    ip.run_line_magic("load_ext", "createos_sync")
    yield ip
    ip.run_line_magic("createos_close", "")


def test_a_cell_runs_in_a_lease_opened_on_first_use_and_closed(
    shell: Any, emulator: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_cell_magic("createos", "", "kept = 6\nprint('in the sandbox')")
    assert len(emulator.live_sandboxes()) == 1
    shown: list[object] = []
    shell.display_pub.publish = lambda data, **kw: shown.append(data)  # what Jupyter receives
    shell.run_cell_magic("createos", "", "kept * 7")
    assert "in the sandbox" in capsys.readouterr().out
    assert shown and shown[-1]["text/plain"] == "42"
    shell.run_line_magic("createos_close", "")
    assert emulator.live_sandboxes() == []


def test_an_error_is_shown_with_the_sandboxs_traceback(shell: Any, emulator: Emulator) -> None:
    with pytest.raises(CodeFailed, match="ZeroDivisionError") as caught:
        shell.run_cell_magic("createos", "", "def f():\n    return 1 / 0\nf()")
    lines = caught.value._render_traceback_()
    assert lines[0] == "Traceback (most recent call last):"
    assert any('File "<cell' in line for line in lines) and lines[-1].startswith("ZeroDivision")


def test_a_name_that_is_not_a_lease_is_refused(shell: Any) -> None:
    with pytest.raises(NameError, match="nothing is not a lease"):
        shell.run_cell_magic("createos", "nothing", "1")


def test_ipython_shows_the_sandboxs_traceback_and_nothing_of_ours(
    shell: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    outcome = shell.run_cell("%%createos\ndef g():\n    return {}['missing']\ng()")
    assert isinstance(outcome.error_in_exec, CodeFailed)
    shown = capsys.readouterr()
    text = shown.out + shown.err
    assert "KeyError: 'missing'" in text and "in g" in text
    assert "_magics.py" not in text and "run_code" not in text
