"""RunResult: the CompletedProcess-like surface."""

from __future__ import annotations

import attrs
import pytest

import createos_sync as cs
from createos_sync import RunResult


def result(**kw: object) -> RunResult:
    base: dict[str, object] = {
        "args": "echo hi",
        "exit_code": 0,
        "stdout": "hi\n",
        "stderr": "",
        "process_id": "p",
    }
    return RunResult(**{**base, **kw})  # type: ignore[arg-type]


def test_ok_and_returncode() -> None:
    assert result().ok and result().returncode == 0
    assert not result(exit_code=1).ok
    assert not result(exit_code=None, timed_out=True).ok


def test_check_returns_self_or_raises_with_result() -> None:
    ok = result()
    assert ok.check() is ok and ok.check_returncode() is ok
    failed = result(exit_code=3)
    with pytest.raises(cs.CommandFailed, match="exited with status 3") as caught:
        failed.check()
    assert caught.value.result is failed
    with pytest.raises(cs.CommandFailed, match="SIGKILL"):
        result(exit_code=None, signal="SIGKILL").check()
    with pytest.raises(cs.CommandTimeout):
        result(exit_code=None, timed_out=True, timeout=2.0).check()


def test_immutable() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        result().stdout = "x"  # type: ignore[misc]


def test_repr_is_short_and_never_dumps_output() -> None:
    text = repr(result(stdout="S" * 10_000, args=["python3", "-c", "x" * 500]))
    assert len(text) < 300 and "SSSS" not in text and "10000 chars" in text


def test_html_repr_escapes() -> None:
    assert "<script>" not in result(stdout="<script>alert(1)</script>")._repr_html_()
