"""``Result``, ``Execution`` and ``CodeFailed`` as users read them; ``import createos_sync``
never importing IPython (``%load_ext createos_sync`` imports it, in ``_magics``)."""

from __future__ import annotations

import subprocess
import sys

import attrs
import pytest

import createos_sync as cs
from createos_sync.interpreter import CodeFailed, Execution, ExecutionError, Result


def test_importing_the_package_does_not_import_ipython() -> None:
    code = "import sys, createos_sync; print('IPython' in sys.modules)"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert found.stdout.strip() == "False", found.stderr


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


def test_a_failure_crosses_process_boundaries_whole() -> None:
    import pickle

    error = ExecutionError("KeyError", "'k'", "Traceback...\nKeyError: 'k'\n")
    execution = Execution(results=[], stdout="out", stderr="", error=error, duration=0.1)
    again = pickle.loads(pickle.dumps(CodeFailed(execution)))
    assert isinstance(again, CodeFailed) and again.execution == execution
    assert str(again) == "the code raised KeyError: 'k'"
