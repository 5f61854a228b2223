"""``%load_ext createos_sync`` and ``%%createos`` under a real IPython shell, against the
emulator; and ``import createos_sync`` never importing IPython."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

import createos_sync as cs
from createos_sync.emulator import Emulator
from createos_sync.interpreter import CodeFailed, Execution, ExecutionError, Result

IPython = pytest.importorskip("IPython")


def test_importing_the_package_does_not_import_ipython() -> None:
    code = "import sys, createos_sync; print('IPython' in sys.modules)"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert found.stdout.strip() == "False", found.stderr


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(rate_limit=None) as emu:
        yield emu


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


def test_results_and_executions_read_well() -> None:
    result = Result.from_bundle(
        {"text/plain": "x", "image/png": "iVBORw==", "image/jpeg": "!!", "application/json": [1]},
        main=True,
    )
    assert result.png == b"\x89PNG" and result.jpeg is None and result.json == [1]
    assert repr(result) == "<Result text png json>"
    assert result._repr_mimebundle_()["image/png"] == "iVBORw=="
    error = ExecutionError("ValueError", "bad", "Traceback...\nValueError: bad\n")
    execution = Execution(results=[result], stdout="", stderr="", error=error, duration=0.5)
    assert execution.text == "x" and not execution.ok
    with pytest.raises(cs.CodeFailed, match="the code raised ValueError: bad"):
        execution.check()
    hostile = ExecutionError("\x1b[2JX", "\x1b]0;title\x07value\r\nmore", "")
    message = str(CodeFailed(attrs.evolve(execution, error=hostile)))
    assert message == "the code raised an exception: valuemore"
