"""Lease.run over the wire: budget, output, timeouts, check, stdin, interrupts."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import pytest

import createos_sync as cs

from .wire import PROCESS, SANDBOX, Chunked, Service, data, exit_frame, ndjson, process


def test_plain_run_costs_three_requests_in_gate_order(box: Any, service: Service) -> None:
    service.run(data(1, "hello\n"), exit_frame(0))
    before = len(service.mock.calls)

    result = box.run("echo hello")

    calls = service.mock.calls[before:]
    assert [(c.request.method, c.request.url.split("/v1")[1].split("?")[0]) for c in calls] == [
        ("POST", f"/sandboxes/{SANDBOX}/processes"),
        ("GET", f"/sandboxes/{SANDBOX}/processes/{PROCESS}/connect"),
        ("POST", f"/sandboxes/{SANDBOX}/processes/{PROCESS}/stdin/close"),
    ]
    assert "after=0" in calls[1].request.url
    assert result.stdout == "hello\n"
    assert result.exit_code == 0 and result.returncode == 0 and result.ok
    assert result.process_id == PROCESS and not result.timed_out


def test_process_is_bash_wrapper_with_gate_then_login_shell(box: Any, service: Service) -> None:
    service.run(exit_frame(0))
    box.run("echo hi")
    body = service.process_bodies()[0]
    assert body["cmd"] == "/bin/bash"
    assert body["args"][0] == "-c"
    wrapper = body["args"][1]
    assert wrapper.index("read -r -d ''") < wrapper.index("exec /bin/bash -lc")
    assert "exec 0</dev/null" in wrapper


def test_stdout_and_stderr_are_separated_and_decoded_across_frames(
    box: Any, service: Service
) -> None:
    snowman = "☃".encode()  # three bytes, split across two frames
    service.run(
        data(1, b"a" + snowman[:1]),
        data(2, "oops\n", "stderr"),
        data(3, snowman[1:] + b"b\n"),
        exit_frame(3),
    )
    seen: list[tuple[str, str]] = []
    result = box.run("x", on_output=lambda s, t: seen.append((s, t)))
    assert result.stdout == "a☃b\n"
    assert result.stderr == "oops\n"
    assert result.exit_code == 3 and not result.ok
    assert seen == [("stdout", "a"), ("stderr", "oops\n"), ("stdout", "☃b\n")]


# Not UTF-8 at all, a NUL, and a character split across frames: text=False keeps each byte.
BINARY = [b"\xff\xfe\x00\x01", "☃".encode()[:1], "☃".encode()[1:] + b"\x80"]


def test_text_false_gives_the_exact_bytes_to_the_result_and_the_callback(
    box: Any, service: Service
) -> None:
    service.run(
        *(data(i + 1, chunk) for i, chunk in enumerate(BINARY)),
        data(4, b"\xc3", "stderr"),
        exit_frame(0),
    )
    seen: list[tuple[str, bytes]] = []
    result = box.run("x", text=False, on_output=lambda s, b: seen.append((s, b)))
    assert result.stdout == b"".join(BINARY) and result.stderr == b"\xc3"
    assert seen == [("stdout", chunk) for chunk in BINARY] + [("stderr", b"\xc3")]
    assert "stdout=<8 bytes>" in repr(result)


def test_text_false_max_output_counts_bytes(box: Any, service: Service) -> None:
    service.run(data(1, "ééé".encode()), exit_frame(0))
    result = box.run("x", text=False, max_output=3)
    assert result.stdout == "ééé".encode()[-3:] and result.truncated


def test_text_mode_replaces_what_is_not_utf8(box: Any, service: Service) -> None:
    service.run(*(data(i + 1, chunk) for i, chunk in enumerate(BINARY)), exit_frame(0))
    assert box.run("x").stdout == "\ufffd\ufffd\x00\x01☃\ufffd"


def test_text_must_be_a_bool(box: Any) -> None:
    with pytest.raises(TypeError, match="text must be True or False"):
        box.run("x", text="yes")


def test_signal_exit_has_no_exit_code(box: Any, service: Service) -> None:
    service.run(exit_frame(None, "SIGKILL"))
    result = box.run("kill -9 $$")
    assert result.exit_code is None and result.signal == "SIGKILL" and not result.ok


def test_dropped_stream_is_replayed_without_duplicates(box: Any, service: Service) -> None:
    service.create_process()
    service.connect(data(1, "one\n"), data(2, "two\n"))  # ends without an exit frame: dropped
    service.close_stdin()
    service.get_sandbox("running")  # is the sandbox still there? It is: reconnect
    service.connect(data(1, "one\n"), data(2, "two\n"), data(3, "three\n"), exit_frame(0))
    result = box.run("count")
    assert result.stdout == "one\ntwo\nthree\n"
    connects = service.calls("GET", "/connect")
    assert ["after=0" in c.request.url for c in connects] == [True, False]
    assert "after=2" in connects[1].request.url
    assert len(service.calls("POST", "/stdin/close")) == 1  # the gate is released once


def test_broken_connection_mid_read_reconnects(box: Any, service: Service) -> None:
    import io

    service.create_process()
    service.connect(raw=io.BufferedReader(Chunked([], ConnectionResetError("reset"))))
    service.close_stdin()
    service.connect(data(1, "ok\n"), exit_frame(0))
    assert box.run("x").stdout == "ok\n"


def test_sequence_gap_is_output_lost(box: Any, service: Service) -> None:
    service.run(data(1, "a"), data(3, "c"), exit_frame(0))
    service.terminate()
    with pytest.raises(cs.OutputLostError, match=r"lost 1 output frame \(2 to 2\)"):
        box.run("x")
    assert len(service.calls("DELETE", f"/processes/{PROCESS}")) == 1  # still contained


def test_evicted_offset_410_is_output_lost(box: Any, service: Service) -> None:
    service.create_process()
    service.connect(http=410)
    service.terminate()
    with pytest.raises(cs.OutputLostError, match="after frame 0: the journal evicted them"):
        box.run("x")


def test_in_stream_eviction_error_is_output_lost(box: Any, service: Service) -> None:
    service.run(data(1, "a"), {"type": "error", "error": "output_offset_expired"})
    service.terminate()
    with pytest.raises(cs.OutputLostError, match="after frame 1: the journal evicted them"):
        box.run("x")


def test_timeout_terminates_tree_and_keeps_partial_output(box: Any, service: Service) -> None:
    class Slow(Chunked):
        def readinto(self, buffer: Any) -> int:
            if not self.pieces:
                time.sleep(0.4)  # the command goes quiet past its timeout
            return super().readinto(buffer)

    import io

    service.create_process()
    service.connect(raw=io.BufferedReader(Slow([ndjson(data(1, "partial\n"))])))
    service.close_stdin()
    service.terminate(tree_exited=True)
    result = box.run("sleep 100", timeout=0.2)
    assert result.timed_out and result.exit_code is None and not result.ok
    assert result.stdout == "partial\n"
    delete = service.calls("DELETE", f"/processes/{PROCESS}")[0]
    assert "grace_ms=1000" in delete.request.url
    with pytest.raises(cs.CommandTimeout, match=r"timed out after its limit of 0\.2 s") as caught:
        result.check()
    assert isinstance(caught.value, TimeoutError) and caught.value.result is result


def test_check_raises_command_failed_with_result(box: Any, service: Service) -> None:
    service.run(data(1, "bad\n", "stderr"), exit_frame(2))
    with pytest.raises(cs.CommandFailed, match="command 'false' exited with status 2") as caught:
        box.run(["false"], check=True)
    assert caught.value.result.exit_code == 2
    assert caught.value.result.stderr == "bad\n"
    assert not isinstance(caught.value, cs.CommandTimeout)


def test_capture_keeps_the_tail_but_callbacks_see_everything(box: Any, service: Service) -> None:
    service.run(data(1, "0123456789"), data(2, "abcdef"), exit_frame(0))
    seen: list[str] = []
    result = box.run("x", max_output=4, on_output=lambda s, t: seen.append(t))
    assert result.stdout == "cdef" and result.truncated
    assert "".join(seen) == "0123456789abcdef"


def test_echo_writes_live_output(
    box: Any, service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    service.run(data(1, "out\n"), data(2, "err\n", "stderr"), exit_frame(0))
    box.run("x", echo=True)
    captured = capsys.readouterr()
    assert captured.out == "out\n" and captured.err == "err\n"


def test_stdin_is_staged_as_a_file_and_redirected(box: Any, service: Service) -> None:
    service.add("PUT", f"/sandboxes/{SANDBOX}/files", body={})
    service.run(exit_frame(0))
    box.run("cat", stdin=b"secret input")
    put = service.calls("PUT", "/files")[0]
    assert put.request.body == b"secret input"
    staged = put.request.params["path"]
    assert staged.startswith("/tmp/")
    wrapper = service.process_bodies()[0]["args"][1]
    assert f"f={staged};" in wrapper and 'exec 0<"$f"' in wrapper and 'rm -f -- "$f"' in wrapper
    assert "secret input" not in json.dumps(service.process_bodies())
    assert len(service.mock.calls) == 2 + 4  # open (2) + PUT, create, connect, release


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"cmd": ""}, ValueError, "the command is empty"),
        ({"cmd": []}, ValueError, "the argv list is empty"),
        ({"cmd": "echo \0"}, ValueError, "the command contains a NUL character"),
        ({"cmd": ["echo", "a\0b"]}, ValueError, "argv item 1 contains a NUL character"),
        ({"cmd": "x", "env": {"1BAD": "v"}}, ValueError, "variable name '1BAD'"),
        ({"cmd": "x", "env": {"A-B": "v"}}, ValueError, "variable name 'A-B'"),
        ({"cmd": "x", "env": {"OK": "nul\0"}}, ValueError, "variable OK contains a NUL character"),
        ({"cmd": "x", "cwd": "/a\0b"}, ValueError, "cwd contains a NUL character"),
        ({"cmd": "x", "timeout": -1}, ValueError, "timeout must be a positive, finite number"),
        ({"cmd": "x", "max_output": -1}, ValueError, "max_output must be an int >= 0"),
        ({"cmd": "x", "stdin": 12}, TypeError, "stdin must be str, bytes, a binary file object"),
        ({"cmd": b"bytes"}, TypeError, r"cmd must be a str \(a bash script\) or a sequence of str"),
    ],
)
def test_invalid_arguments_fail_before_any_request(
    box: Any, service: Service, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    before = len(service.mock.calls)
    cmd = kwargs.pop("cmd")
    with pytest.raises(error, match=message):
        box.run(cmd, **kwargs)
    assert len(service.mock.calls) == before


def test_env_value_never_in_error_message(box: Any) -> None:
    with pytest.raises(ValueError) as caught:
        box.run("x", env={"TOKEN": "hunter2\0"})
    assert "hunter2" not in str(caught.value)


def test_ctrl_c_terminates_the_remote_process_then_reraises(box: Any, service: Service) -> None:
    service.run(data(1, "x"), exit_frame(0))
    service.terminate(tree_exited=True)

    def interrupt(stream: str, text: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        box.run("sleep 100", on_output=interrupt)
    assert len(service.calls("DELETE", f"/processes/{PROCESS}")) == 1
    assert not box._box.table.poisoned


def test_second_ctrl_c_during_termination_destroys_the_sandbox(box: Any, service: Service) -> None:
    service.run(data(1, "x"), exit_frame(0))
    service.add("DELETE", f"/sandboxes/{SANDBOX}/processes/{PROCESS}", body=KeyboardInterrupt())
    service.destroy_sandbox()

    def interrupt(stream: str, text: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        box.run("sleep 100", on_output=interrupt)
    assert len(service.calls("DELETE", f"/sandboxes/{SANDBOX}")) >= 1
    assert service.calls("DELETE")[-1].request.url.endswith(f"/sandboxes/{SANDBOX}")
    assert box.closed


def test_connect_5xx_is_one_reconnection_not_a_transport_retry_storm(
    box: Any, service: Service
) -> None:
    service.create_process()
    service.connect(http=503)
    service.connect(data(1, "ok\n"), exit_frame(0))
    service.close_stdin()
    assert box.run("x").stdout == "ok\n"
    assert len(service.calls("GET", "/connect")) == 2


def test_a_stream_that_never_holds_gives_up_after_a_bounded_number_of_attempts(
    box: Any, service: Service
) -> None:
    service.create_process()
    for _ in range(6):
        service.connect(http=502)
    service.terminate()
    with pytest.raises(cs.CreateosApiError, match="HTTP 502 during output connection") as caught:
        box.run("x")
    # Never attached, so the start gate was never released: no exit status to recover.
    assert caught.value.status == 502
    assert len(service.calls("GET", "/connect")) == 6
    assert not service.calls("GET", "/wait")


# --- lost output says how much; a dropping stream; a sandbox dying mid-run --------------

WAIT = f"/sandboxes/{SANDBOX}/processes/{PROCESS}/wait"


def test_an_eviction_frame_says_how_many_frames_were_lost(box: Any, service: Service) -> None:
    service.run(
        data(1, "a"),
        {"type": "error", "error": "output_offset_expired", "oldest_available_seq": 12},
    )
    service.terminate()
    with pytest.raises(cs.OutputLostError) as caught:
        box.run("x")
    assert caught.value.lost_through == 11
    assert "lost 10 output frames (2 to 11)" in str(caught.value)


def test_a_410_reads_where_the_journal_starts_to_say_how_much_was_lost(
    box: Any, service: Service
) -> None:
    service.create_process()
    service.connect(http=410)
    service.get_process(body=process(output={"oldest_seq": 31, "newest_seq": 40}))
    service.terminate()
    with pytest.raises(cs.OutputLostError) as caught:
        box.run("x")
    assert caught.value.lost_through == 30 and "lost 30 output frames (1 to 30)" in str(
        caught.value
    )


def test_a_gap_says_which_frames_are_missing(box: Any, service: Service) -> None:
    service.run(data(1, "a"), data(4, "d"), exit_frame(0))
    service.terminate()
    with pytest.raises(cs.OutputLostError) as caught:
        box.run("x")
    assert caught.value.lost_through == 3 and "(2 to 3)" in str(caught.value)


def _dropping(service: Service, times: int) -> None:
    """A stream that attaches, delivers frame 1, then drops on every reconnection."""
    service.create_process()
    service.connect(data(1, "one\n"))  # ends without the exit frame...
    service.close_stdin()
    service.get_sandbox("running")  # ... in a sandbox that is fine
    for _ in range(times):
        service.connect(raw=io.BufferedReader(Chunked([], reset())))


def reset() -> ConnectionResetError:
    return ConnectionResetError("reset")


def test_a_stream_that_keeps_dropping_recovers_the_exit_status_with_wait(
    box: Any, service: Service
) -> None:
    _dropping(service, 5)
    service.add("GET", WAIT, 408)  # not yet: poll again
    finished = process(tree_exited=True, exit_code=3, output={"oldest_seq": 1, "newest_seq": 1})
    service.add("GET", WAIT, body=finished)
    result = box.run("x")
    # Every frame was read before the drops: nothing lost, the exit status is the command's.
    assert (result.exit_code, result.stdout, result.timed_out) == (3, "one\n", False)
    waits = service.calls("GET", "/wait")
    assert len(waits) == 2 and all("scope=tree" in c.request.url for c in waits)
    assert all("timeout_ms=" in c.request.url for c in waits)
    assert not service.calls("DELETE")  # the tree has exited: nothing to terminate


def test_output_that_could_not_be_read_is_reported_lost_with_the_result(
    box: Any, service: Service
) -> None:
    _dropping(service, 5)
    finished = process(tree_exited=True, exit_code=0, output={"oldest_seq": 1, "newest_seq": 9})
    service.add("GET", WAIT, body=finished)
    with pytest.raises(cs.OutputLostError) as caught:
        box.run("x")
    error = caught.value
    assert error.lost_through == 9 and "lost 8 output frames (2 to 9)" in str(error)
    assert error.result is not None
    assert (error.result.exit_code, error.result.stdout) == (0, "one\n")


def test_a_stream_ending_without_exit_in_a_failed_sandbox_is_sandbox_unavailable(
    box: Any, service: Service
) -> None:
    service.create_process()
    service.connect(data(1, "partial\n"))  # ends cleanly, no exit frame
    service.close_stdin()
    service.get_sandbox("failed")
    service.terminate()
    with pytest.raises(cs.SandboxUnavailable) as caught:
        box.run("x")
    assert caught.value.sandbox_id == SANDBOX and caught.value.status == "failed"
    assert str(caught.value).startswith(f"sandbox {SANDBOX} is failed")
    assert len(service.calls("GET", "/connect")) == 1  # no reconnection to a dead sandbox


@pytest.mark.parametrize("overdue", [True, False])
def test_a_run_killed_with_its_sandbox_raises_lease_expired_or_sandbox_unavailable(
    box: Any, service: Service, overdue: bool
) -> None:
    """Issue 22, item 4: a SIGKILL that closing did not send costs 1 read of the sandbox;
    found gone, the run raises (``LeaseExpired`` when the ttl could have run out since the
    last renewal), not an ordinary ``RunResult(signal='SIGKILL')``."""
    service.run(data(1, "partial\n"), exit_frame(None, "SIGKILL"))
    service.add("GET", f"/sandboxes/{SANDBOX}", 404)
    before = len(service.mock.calls)
    asked: list[bool] = []

    def overdue_by_then() -> bool:  # frozen past its ttl after the call's own check
        asked.append(True)
        return overdue and len(asked) > 1

    box._watchdog._overdue = overdue_by_then
    with pytest.raises(cs.SandboxUnavailable, match=f"sandbox {SANDBOX} is destroyed: ") as caught:
        box.run("x")
    assert isinstance(caught.value, cs.LeaseExpired) is overdue
    assert caught.value.sandbox_id == SANDBOX
    assert len(service.mock.calls) - before == 4  # the run's 3, and the one read
    with pytest.raises(cs.SandboxUnavailable, match=f"sandbox {SANDBOX} is destroyed: "):
        box.run("x")  # found gone: refused before any request
    assert len(service.mock.calls) - before == 4


def test_a_run_killed_by_sigkill_in_a_live_sandbox_keeps_its_result(
    box: Any, service: Service
) -> None:
    service.run(exit_frame(None, "SIGKILL"))
    service.get_sandbox("running")
    result = box.run("kill -9 $$")
    reads = [c for c in service.calls("GET") if c.request.url.endswith(f"/sandboxes/{SANDBOX}")]
    assert result.signal == "SIGKILL" and len(reads) == 1  # alive: an ordinary result


@pytest.mark.parametrize("status", ["error", "destroying"])
def test_process_creation_409_in_a_dead_sandbox_is_sandbox_unavailable(
    box: Any, service: Service, status: str
) -> None:
    service.create_process(http=409)
    service.get_sandbox(status)
    with pytest.raises(cs.SandboxUnavailable) as caught:
        box.run("x")
    assert caught.value.status == status and "HTTP 409" not in str(caught.value)


def test_process_creation_409_in_a_running_sandbox_stays_an_api_error(
    box: Any, service: Service
) -> None:
    service.create_process(http=409)
    service.get_sandbox("running")
    with pytest.raises(cs.CreateosApiError, match="HTTP 409 during process creation") as caught:
        box.run("x")
    assert caught.value.status == 409


def test_a_hostile_exit_signal_never_reaches_the_result(box: Any, service: Service) -> None:
    service.run(exit_frame(None, "SIGKILL sk-live-SECRET-abc123"))
    result = box.run("x")
    assert result.signal == "(unrecognised)" and result.exit_code is None


def test_a_hostile_stream_error_code_is_a_placeholder(box: Any, service: Service) -> None:
    service.run({"type": "error", "error": "sk-live-SECRET-abc123 leaked"})
    service.terminate()
    with pytest.raises(cs.ProtocolError) as caught:
        box.run("x")
    assert "SECRET" not in str(caught.value) and "(unrecognised)" in str(caught.value)


def test_a_failed_bytes_command_shows_its_output_decoded(box: Any, service: Service) -> None:
    service.run(data(1, b"\xffboom\n", "stderr"), exit_frame(2))
    with pytest.raises(cs.CommandFailed, match="stderr:\n  \ufffdboom") as caught:
        box.run("x", text=False, check=True)
    assert caught.value.result.stderr == b"\xffboom\n"
