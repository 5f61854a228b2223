"""Terminal processes over the wire: the pty field, the typed gate release, resize, budgets."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import pytest

import createos_sync as cs
from createos_sync._commands.terminal import terminal_size

from .wire import PROCESS, SANDBOX, Service, data, exit_frame

PROC_PATH = f"/sandboxes/{SANDBOX}/processes/{PROCESS}"


def typed(service: Service) -> list[bytes]:
    """What each input request typed, in order."""
    return [
        base64.b64decode(json.loads(c.request.body)["data_base64"])
        for c in service.calls("POST", "/input")
    ]


def paths(calls: list[Any]) -> list[tuple[str, str]]:
    return [(c.request.method, c.request.url.split("/v1")[1].split("?")[0]) for c in calls]


def start_terminal(box: Any, service: Service, **options: Any) -> Any:
    service.create_process(body={"process_id": PROCESS, "kind": "pty", "state": "running"})
    service.connect(data(1, "$ ", "pty"), exit_frame(0))
    service.add("POST", f"{PROC_PATH}/input", body={"input_seq": 1})
    return box.start("bash", **options)


def test_run_on_a_terminal_costs_three_requests_and_types_its_release(
    box: Any, service: Service
) -> None:
    service.create_process(body={"process_id": PROCESS, "kind": "pty", "state": "running"})
    service.connect(data(1, "30 100\r\n", "pty"), data(2, "x\r\n", "pty"), exit_frame(0))
    service.add("POST", f"{PROC_PATH}/input", body={"input_seq": 1})
    before = len(service.mock.calls)

    result = box.run("stty size; echo x", pty=(30, 100))

    assert paths(service.mock.calls[before:]) == [
        ("POST", f"/sandboxes/{SANDBOX}/processes"),
        ("GET", f"{PROC_PATH}/connect"),
        ("POST", f"{PROC_PATH}/input"),  # not stdin/close: a terminal has no stdin to close
    ]
    body = service.process_bodies()[0]
    assert body["pty"] == {"rows": 30, "cols": 100}
    # the gate's release key, then Ctrl-D: a line reader sees the end of its input
    assert typed(service) == [b"\x04\x04"]
    assert (result.stdout, result.stderr, result.exit_code) == ("30 100\r\nx\r\n", "", 0)


def test_terminal_gate_reads_a_line_and_keeps_the_terminal_as_stdin(
    box: Any, service: Service
) -> None:
    start_terminal(box, service, pty=True).wait(timeout=10)
    body = service.process_bodies()[0]
    assert body["pty"] == {"rows": 24, "cols": 80}
    wrapper = body["args"][1]
    # `read -d` would switch the terminal to one-character mode and echo the key
    assert "IFS= read -r _ || :" in wrapper and "read -r -d" not in wrapper
    assert "exec 0<" not in wrapper
    assert "export TERM=xterm-256color; " in wrapper  # programs that draw need TERM
    assert typed(service) == [b"\x04"]  # start() types only the release: the rest is the user's


def test_the_users_term_wins(box: Any, service: Service) -> None:
    start_terminal(box, service, pty=True, env={"TERM": "vt100"}).wait(timeout=10)
    wrapper = service.process_bodies()[0]["args"][1]
    assert "TERM=vt100" in wrapper and "xterm-256color" not in wrapper


def test_plain_processes_send_no_pty_field(box: Any, service: Service) -> None:
    service.run(exit_frame(0))
    box.run("true", pty=False)
    assert "pty" not in service.process_bodies()[0]


def test_resize_is_one_request_with_the_new_size(box: Any, service: Service) -> None:
    process = start_terminal(box, service, pty=(24, 80))
    service.add("POST", f"{PROC_PATH}/resize", body={"process_id": PROCESS})
    process.resize(50, 132)
    [call] = service.calls("POST", "/resize")
    assert json.loads(call.request.body) == {"rows": 50, "cols": 132}
    process.wait(timeout=10)


@pytest.mark.parametrize(
    ("rows", "cols", "error", "message"),
    [(0, 80, ValueError, r"terminal rows must be in 1\.\.65535, not 0"),
     (24, 65536, ValueError, r"terminal cols must be in 1\.\.65535, not 65536"),
     (-1, 80, ValueError, r"terminal rows must be in 1\.\.65535, not -1"),
     (24.0, 80, TypeError, "terminal rows must be an int"),
     (True, 80, TypeError, "terminal rows must be an int"),
     ("24", 80, TypeError, "terminal rows must be an int")],
)  # fmt: skip
def test_invalid_resize_raises_before_any_request(
    box: Any, service: Service, rows: Any, cols: Any, error: type[Exception], message: str
) -> None:
    process = start_terminal(box, service, pty=True)
    before = len(service.mock.calls)
    with pytest.raises(error, match=message):
        process.resize(rows, cols)
    assert len(service.mock.calls) == before
    process.wait(timeout=10)


def test_resize_and_close_stdin_are_refused_for_the_wrong_kind(box: Any, service: Service) -> None:
    terminal = start_terminal(box, service, pty=True)
    terminal.wait(timeout=10)
    service.create_process()
    service.connect(exit_frame(0))
    service.add("POST", f"{PROC_PATH}/input", body={"input_seq": 1})
    plain = box.start("cat")
    plain.wait(timeout=10)
    before = len(service.mock.calls)
    with pytest.raises(ValueError, match="not on a terminal"):
        plain.resize(24, 80)
    with pytest.raises(ValueError, match="no stdin to close"):
        terminal.close_stdin()
    assert len(service.mock.calls) == before


@pytest.mark.parametrize(
    ("pty", "error", "message"),
    [((0, 80), ValueError, r"terminal rows must be in 1\.\.65535, not 0"),
     ((24, 0), ValueError, r"terminal cols must be in 1\.\.65535, not 0"),
     ((24, 70000), ValueError, r"terminal cols must be in 1\.\.65535, not 70000"),
     ((24,), TypeError, r"pty must be True, False, None or \(rows, cols\)"),
     ((24, 80, 1), TypeError, r"pty must be True, False, None or \(rows, cols\)"),
     ("80x24", TypeError, r"pty must be True, False, None or \(rows, cols\)"),
     (1, TypeError, r"pty must be True, False, None or \(rows, cols\)"),
     ((24.5, 80), TypeError, "terminal rows must be an int")],
)  # fmt: skip
def test_invalid_pty_raises_before_any_request(
    box: Any, service: Service, pty: Any, error: type[Exception], message: str
) -> None:
    before = len(service.mock.calls)
    with pytest.raises(error, match=message):
        box.run("true", pty=pty)
    with pytest.raises(error, match=message):
        box.start("true", pty=pty)
    assert len(service.mock.calls) == before


def test_stdin_cannot_be_given_to_a_terminal(box: Any, service: Service) -> None:
    before = len(service.mock.calls)
    with pytest.raises(ValueError, match="reads what is typed"):
        box.run("cat", pty=True, stdin="data")
    with pytest.raises(ValueError, match="reads what is typed"):
        box.start("cat", pty=True, stdin=b"data")
    assert len(service.mock.calls) == before


def test_pty_sizes_accepted() -> None:
    assert terminal_size(None) is None and terminal_size(False) is None
    assert terminal_size(True) == (24, 80)
    assert terminal_size((50, 132)) == (50, 132) and terminal_size([1, 65535]) == (1, 65535)
    # os.terminal_size lists columns first: read by name, never swapped
    assert terminal_size(os.terminal_size((132, 50))) == (50, 132)


def test_reattached_terminal_process_can_be_resized(box: Any, service: Service) -> None:
    service.add(
        "GET",
        PROC_PATH,
        body={"process_id": PROCESS, "kind": "pty", "state": "running", "args": []},
    )
    service.connect(exit_frame(0))
    service.add("POST", f"{PROC_PATH}/resize", body={"process_id": PROCESS})
    process = box.process(PROCESS)
    process.resize(30, 90)
    assert len(service.calls("POST", "/resize")) == 1
    process.wait(timeout=10)


def test_a_process_started_without_the_terminal_asked_for_is_terminated(
    box: Any, service: Service
) -> None:
    # Its gate waits for a line: the terminal's release key would never open it.
    service.create_process(body={"process_id": PROCESS, "kind": "process", "state": "running"})
    service.terminate()
    with pytest.raises(cs.ProtocolError, match="without a terminal"):
        box.start("bash", pty=True)
    assert paths(service.calls())[-1] == ("DELETE", PROC_PATH)
    assert service.calls("POST", "/input") == []
