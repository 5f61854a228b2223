"""Terminal processes through the SDK, on the emulator's real pseudo-terminals."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import createos_sync as cs
from createos_sync.emulator import Emulator
from createos_sync.process import Process

from .helpers import operations

DEADLINE = 60.0  # generous: bounds a hang on a loaded machine, times nothing


def until(process: Process, output: Iterator[tuple[str, str]], marker: str, seen: str = "") -> str:
    """Read ``output`` until ``marker`` shows; everything read (after ``seen``).

    A marker that never comes fails the test instead of hanging it: the
    process is killed after a generous deadline, which ends its output.
    """
    watchdog = threading.Timer(DEADLINE, process.kill)
    watchdog.start()
    try:
        while marker not in seen:
            item = next(output, None)
            assert item is not None, f"{marker!r} never came; got {seen!r}"
            assert item[0] == "stdout"  # a terminal has one stream
            seen += item[1]
    finally:
        watchdog.cancel()
    return seen


def test_stty_size_shows_the_size_asked_for_and_after_resize(box: cs.Lease) -> None:
    assert box.run("stty size", pty=(30, 100)).stdout == "30 100\r\n"
    assert box.run("stty size", pty=True).stdout == "24 80\r\n"
    # bash runs a trap once a `wait` is interrupted (a `read` would hold it until a line comes);
    # "ready" comes once the sleep is started: a resize before would find no `$!` to kill
    script = "trap 'echo \"now $(stty size)\"; kill $!' WINCH; sleep 600 & echo ready; wait; "
    process = box.start(script + "read -r _; stty size", pty=(30, 100))
    output = process.output()
    until(process, output, "ready\r\n")
    process.resize(50, 132)
    until(process, output, "now 50 132\r\n")  # the foreground program got SIGWINCH
    process.send("\r")
    assert until(process, output, "\r\n50 132\r\n")
    assert process.wait(timeout=60).exit_code == 0


def test_tty_succeeds_on_a_terminal_and_fails_on_a_pipe(box: cs.Lease) -> None:
    on_terminal = box.run("tty -s", pty=True)
    plain = box.run("tty -s")
    assert on_terminal.exit_code == 0 and plain.exit_code == 1
    assert (on_terminal.stdout, on_terminal.stderr) == ("", "")


def test_a_python_repl_driven_by_send(box: cs.Lease) -> None:
    repl = box.start(["python3", "-i", "-q"], pty=True)
    output = repl.output()
    seen = until(repl, output, ">>> ")
    repl.send("print(6 * 7)\r")
    seen = until(repl, output, "42\r\n>>> ", seen)
    repl.send("import os; print(os.get_terminal_size())\r")
    seen = until(repl, output, "columns=80, lines=24)\r\n>>> ", seen)
    repl.send("\x04")  # Ctrl-D at an empty prompt ends the REPL
    result = repl.wait(timeout=60)
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout.startswith(">>> print(6 * 7)\r\n42\r\n")  # typed keys are echoed


def test_a_fast_command_loses_nothing_and_shows_nothing_of_the_gate(box: cs.Lease) -> None:
    # The release key must be neither echoed nor left for the command to read.
    assert box.run("echo hi", pty=True).stdout == "hi\r\n"
    started = box.start("echo hi", pty=True)
    assert started.wait(timeout=60).stdout == "hi\r\n"
    lines = box.run("seq 1 50000", pty=True).stdout.split("\r\n")
    assert lines == [str(i) for i in range(1, 50001)] + [""]


def test_a_line_reader_sees_the_end_of_its_input_in_run(box: cs.Lease) -> None:
    result = box.run('read -r line; echo "status $?"', pty=True, timeout=60)
    assert result.stdout == "status 1\r\n" and not result.timed_out


def test_request_budget_is_that_of_any_process(emulator: Emulator, box: cs.Lease) -> None:
    before = len(operations(emulator, box.id))
    box.run("true", pty=True)
    process = box.start("read -r _", pty=True)
    process.resize(30, 90)
    process.send("\r")
    process.wait(timeout=60)
    ops = [op for op, _ in operations(emulator, box.id)[before:]]
    assert sorted(ops) == sorted(
        ["process.create", "process.connect", "process.input"] * 2
        + ["process.resize", "process.input"]
    )


def test_a_timed_out_terminal_command_is_terminated(box: cs.Lease) -> None:
    result = box.run("echo started; exec sleep 600", pty=True, timeout=4)
    assert result.timed_out and result.exit_code is None
    assert result.stdout == "started\r\n"


def test_a_running_terminal_process_is_terminated_at_close(
    emulator: Emulator, client: cs.Client
) -> None:
    with client.lease() as box:
        process = box.start("sleep 600", pty=True)
        assert process.running
    # the autouse fixture checks that no process of the sandbox is left
    assert not process.running


def test_reattaching_finds_a_terminal(box: cs.Lease) -> None:
    process = box.start("trap 'stty size; kill $!' WINCH; sleep 600 & echo ready; wait", pty=True)
    until(process, process.output(), "ready")
    again = box.process(process.id)
    again.resize(33, 99)
    assert again.wait(timeout=60).stdout.endswith("ready\r\n33 99\r\n")
