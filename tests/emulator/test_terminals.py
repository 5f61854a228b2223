"""Terminal processes (``pty: {rows, cols}``): real pseudo-terminals in both isolation modes."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from createos_sync.emulator._machine.terminal import (
    open_terminal,
    read_output,
    with_controlling_tty,
)

from .helpers import Api, output

DEADLINE = 60.0  # generous: bounds a hang on a loaded machine, times nothing
# Is the process a session leader, in the foreground of the terminal on its stdin
# (tcgetpgrp fails on a terminal that is not the controlling one), able to open it?
OWNS_TERMINAL = (
    "import os; os.close(os.open('/dev/tty', os.O_RDWR)); "
    "print(os.getsid(0) == os.getpid(), os.tcgetpgrp(0) == os.getpgrp(), os.isatty(1))"
)


def terminal(api: Api, sandbox_id: str, script: str, rows: int = 24, cols: int = 80) -> str:
    return api.process(sandbox_id, "bash", "-c", script, pty={"rows": rows, "cols": cols})


def typed(api: Api, sandbox_id: str, process_id: str, keys: bytes) -> None:
    api.data(
        "POST",
        api.proc_path(sandbox_id, process_id, "/input"),
        json={"data_base64": base64.b64encode(keys).decode()},
    )


class Screen:
    """A live connect stream of one process, read until expected output has come."""

    def __init__(self, api: Api, sandbox_id: str, process_id: str) -> None:
        self._response = api.connect(sandbox_id, process_id)
        assert self._response.status_code == 200
        self._lines: Iterator[bytes] = self._response.iter_lines()
        self.text = b""
        self.streams: set[str] = set()

    def until(self, marker: bytes) -> bytes:
        deadline = time.monotonic() + DEADLINE
        while marker not in self.text:
            assert time.monotonic() < deadline, f"{marker!r} never came: {self.text!r}"
            frame: dict[str, Any] = json.loads(next(self._lines))
            assert frame["type"] != "exit", f"exited before {marker!r}: {self.text!r}"
            if frame["type"] == "data":
                self.streams.add(frame["stream"])
                self.text += base64.b64decode(frame["data_base64"])
        return self.text

    def close(self) -> None:
        self._response.close()


def test_the_process_owns_its_terminal_and_reports_kind_pty(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    process_id = any_api.process(
        sandbox_id, "python3", "-c", OWNS_TERMINAL, pty={"rows": 24, "cols": 80}
    )
    frames = any_api.frames(sandbox_id, process_id)
    assert {f["stream"] for f in frames if f["type"] == "data"} == {"pty"}
    assert output(frames) == b"True True True\r\n"  # the terminal translates \n (onlcr)
    info = any_api.wait_exit(sandbox_id, process_id)
    assert (info["kind"], info["exit_code"]) == ("pty", 0)
    listed = any_api.data("GET", f"/v1/sandboxes/{sandbox_id}/processes")["processes"]
    assert [(p["process_id"], p["kind"]) for p in listed] == [(process_id, "pty")]


def test_size_resize_sigwinch_and_typed_input(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    script = (
        'trap \'echo "winch $(stty size)"\' WINCH; echo "size $(stty size)"; '
        'tty -s && echo on-a-tty; IFS= read -r line; echo "got $line"'
    )
    process_id = terminal(any_api, sandbox_id, script, rows=30, cols=100)
    screen = Screen(any_api, sandbox_id, process_id)
    try:
        screen.until(b"size 30 100\r\non-a-tty\r\n")
        any_api.data(
            "POST",
            any_api.proc_path(sandbox_id, process_id, "/resize"),
            json={"rows": 40, "cols": 120},
        )
        typed(any_api, sandbox_id, process_id, b"hello\r")  # Enter is \r; the terminal echoes
        text = screen.until(b"got hello\r\n")
        assert b"winch 40 120\r\n" in text and b"hello\r\n" in text
        assert screen.streams == {"pty"}
    finally:
        screen.close()
    assert any_api.wait_exit(sandbox_id, process_id)["exit_code"] == 0
    after_exit = any_api.call(
        "POST", any_api.proc_path(sandbox_id, process_id, "/resize"), json={"rows": 5, "cols": 5}
    )
    assert after_exit.status_code == 409


def test_ctrl_c_typed_interrupts_the_foreground_program(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    process_id = terminal(any_api, sandbox_id, "trap 'echo interrupted; exit 4' INT; echo ready; "
                          "sleep 600 & wait")  # fmt: skip
    screen = Screen(any_api, sandbox_id, process_id)
    try:
        screen.until(b"ready")
        typed(any_api, sandbox_id, process_id, b"\x03")
        screen.until(b"interrupted")
    finally:
        screen.close()
    assert any_api.wait_exit(sandbox_id, process_id)["exit_code"] == 4


def test_fast_output_is_complete_and_a_lingering_child_does_not_hang_it(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    process_id = terminal(any_api, sandbox_id, "seq 1 30000; sleep 600 &")
    lines = output(any_api.frames(sandbox_id, process_id)).split(b"\r\n")
    assert lines == [str(i).encode() for i in range(1, 30001)] + [b""]
    any_api.call("DELETE", any_api.proc_path(sandbox_id, process_id))


@pytest.mark.parametrize(
    "pty",
    [{"rows": 0, "cols": 80}, {"rows": 24}, {"rows": 24, "cols": 65536}, [24, 80],
     {"rows": "24", "cols": 80}, {"rows": True, "cols": 80}],
)  # fmt: skip
def test_invalid_sizes_are_refused(api: Api, pty: Any) -> None:
    sandbox_id = api.sandbox()
    reply = api.call(
        "POST", f"/v1/sandboxes/{sandbox_id}/processes", json={"cmd": "true", "pty": pty}
    )
    assert reply.status_code == 400
    assert api.data("GET", f"/v1/sandboxes/{sandbox_id}/processes")["processes"] == []


def test_pipe_only_and_terminal_only_operations(api: Api) -> None:
    sandbox_id = api.sandbox()
    plain = api.process(sandbox_id, "cat")
    tty = terminal(api, sandbox_id, "cat")
    refused = api.call("POST", api.proc_path(sandbox_id, plain, "/resize"),
                       json={"rows": 24, "cols": 80})  # fmt: skip
    assert refused.status_code == 400
    assert api.call("POST", api.proc_path(sandbox_id, tty, "/stdin/close")).status_code == 400
    bad = api.call("POST", api.proc_path(sandbox_id, tty, "/resize"), json={"rows": 0, "cols": 1})
    assert bad.status_code == 400
    typed(api, sandbox_id, tty, b"\x04")  # Ctrl-D at the start of a line: cat reads EOF
    assert api.wait_exit(sandbox_id, tty)["exit_code"] == 0
    api.call("POST", api.proc_path(sandbox_id, plain, "/stdin/close"))
    assert api.wait_exit(sandbox_id, plain)["exit_code"] == 0


def test_the_helper_without_a_reporter_gives_the_terminal_to_the_command() -> None:
    # bubblewrap without the status reporter: the helper runs on the host, before bwrap
    master, slave = open_terminal(24, 80)
    try:
        argv = with_controlling_tty([sys.executable, "-c", OWNS_TERMINAL])
        assert "-c" not in argv[: argv.index(sys.executable, 1)]  # run from its file
        child = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
        )
        os.close(slave)
        seen = b""
        while chunk := read_output(master, 4096):
            seen += chunk
        assert child.wait(timeout=DEADLINE) == 0
        assert seen == b"True True True\r\n"
    finally:
        os.close(master)
