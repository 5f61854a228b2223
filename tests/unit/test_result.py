"""RunResult: the CompletedProcess-like surface."""

from __future__ import annotations

import attrs
import pytest

import createos_sync as cs
from createos_sync import RunResult


def result(**kw: object) -> RunResult[str]:
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
    with pytest.raises(cs.CommandTimeout, match="timed out after its limit of 2 s"):
        result(exit_code=None, timed_out=True, timeout=2.0).check()


def test_immutable() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        result().stdout = "x"  # type: ignore[misc]


def test_repr_is_short_and_never_dumps_output() -> None:
    text = repr(result(stdout="S" * 10_000, args=["python3", "-c", "x" * 500]))
    assert len(text) < 300 and "SSSS" not in text and "10000 chars" in text


def test_html_repr_escapes() -> None:
    assert "<script>" not in result(stdout="<script>alert(1)</script>")._repr_html_()


def test_failure_message_ends_with_a_bounded_stderr_tail() -> None:
    lines = [f"line {i}" for i in range(1, 9)]
    stderr = "\n".join([*lines[:-1], "\x1b[31m" + "x" * 500, ""])
    failed = result(exit_code=2, stdout="", stderr=stderr)
    with pytest.raises(cs.CommandFailed) as caught:
        failed.check()
    message = str(caught.value)
    first, header, *tail = message.splitlines()
    assert first.startswith("command 'echo hi' exited with status 2")
    assert header == "stderr (last 5 of 8 lines):"
    assert tail[:4] == ["  line 4", "  line 5", "  line 6", "  line 7"]
    assert tail[4].startswith("  ?[31mxxx") and tail[4].endswith("...") and len(tail[4]) == 202
    assert "\x1b" not in message
    assert caught.value.result.stderr == stderr  # .result keeps everything


def test_timeout_message_shows_stderr_and_a_quiet_failure_shows_none() -> None:
    with pytest.raises(cs.CommandTimeout) as caught:
        result(exit_code=None, timed_out=True, timeout=2.0, stdout="", stderr="wait\n").check()
    assert str(caught.value).splitlines()[1:] == ["stderr:", "  wait"]
    with pytest.raises(cs.CommandFailed) as quiet:
        result(exit_code=1, stdout="", stderr=" \n").check()
    assert "\n" not in str(quiet.value)


def test_failure_message_shows_the_stdout_tail_too_each_stream_labelled() -> None:
    # pytest and make report their failures on stdout: the message must show it.
    stdout = "".join(f"test_{i} PASSED\n" for i in range(7)) + "FAILED test_x - assert 1 == 2\n"
    with pytest.raises(cs.CommandFailed) as only_stdout:
        result(exit_code=1, stdout=stdout).check()
    assert str(only_stdout.value).splitlines()[1:] == [
        "stdout (last 5 of 8 lines):",
        *[f"  test_{i} PASSED" for i in range(3, 7)],
        "  FAILED test_x - assert 1 == 2",
    ]
    with pytest.raises(cs.CommandFailed) as both:
        result(exit_code=2, stdout="1 failed\n", stderr="warning: slow\n").check()
    tails = ["stdout:", "  1 failed", "stderr:", "  warning: slow"]
    assert str(both.value).splitlines()[1:] == tails


def test_a_timed_out_result_shows_the_timeout_it_reached() -> None:
    # The default timeout (300 s) does not raise: the repr is where a user sees it stopped.
    shown = repr(result(exit_code=None, timed_out=True, timeout=300.0))
    assert "timed_out=True (timeout=300s)" in shown
    assert "timed_out=True," in repr(result(exit_code=None, timed_out=True))


def test_a_bytes_result_counts_bytes() -> None:
    shown = repr(result(stdout=b"\xff\x00", stderr=b""))
    assert "stdout=<2 bytes>, stderr=<0 bytes>" in shown
    assert "(2 bytes)" in result(stdout=b"\xff\x00")._repr_html_()
