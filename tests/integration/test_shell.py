"""``createos-sync shell`` and ``run --tty`` under a real terminal, driven with pexpect.

Each CLI runs inside ``sh -c 'CLI; echo status=$?; stty -a'`` on a pseudo-
terminal of pexpect's, so that the test sees the CLI's exit status and then
the terminal's mode as the CLI left it (raw mode shows as -icanon -echo).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
from pathlib import Path

import pexpect
import pytest

import createos_sync as cs
from createos_sync.cli import _run
from createos_sync.emulator import Emulator, Fault

from .helpers import operations, processes_of
from .subprocesses import CLI, DEADLINE, emulator_env

PROMPT = "READY> "
# What `stty -a` prints for a terminal in its normal (cooked) mode.
COOKED = (re.compile(r"(?<![-\w])icanon\b"), re.compile(r"(?<![-\w])echo\b"))


def spawn(args: list[str], env: dict[str, str], size: tuple[int, int] = (30, 90)) -> pexpect.spawn:
    """The CLI on a terminal of ``size``, followed by its status and the terminal's mode."""
    command = shlex.join([*CLI, *args])
    script = f'{command}; echo "status=$?"; stty -a'
    child = pexpect.spawn(
        "/bin/sh", ["-c", script], env=env, dimensions=size, timeout=DEADLINE, encoding="utf-8"
    )
    return child


def local_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CREATEOS_")}
    env.update(TERM="xterm", CREATEOS_SYNC_STATE_DIR=os.environ["CREATEOS_SYNC_STATE_DIR"])
    return env


def at_prompt(child: pexpect.spawn) -> None:
    """Wait for the remote login shell's prompt, then make it one that is easy to match."""
    child.expect(r"[$#] ")  # bash's default prompt, as a login shell shows it
    child.send(f"PS1='{PROMPT}'\r")
    child.expect_exact(PROMPT)


def finished(child: pexpect.spawn) -> int:
    """The CLI's exit status, after checking that it left the terminal as it found it."""
    child.expect(r"status=(\d+)\r\n")
    status = int(child.match.group(1))
    child.expect(pexpect.EOF)
    modes = child.before
    assert all(mode.search(modes) for mode in COOKED), f"terminal left in raw mode: {modes}"
    child.close()
    return status


def test_shell_prompt_size_resize_ctrl_c_and_exit_status() -> None:
    child = spawn(["shell", "--local"], local_env(), size=(30, 90))
    at_prompt(child)
    child.send("stty size\r")
    child.expect_exact("30 90\r\n")
    child.expect_exact(PROMPT)
    child.setwinsize(40, 100)  # SIGWINCH to the CLI, forwarded as a resize
    child.send("stty size\r")
    child.expect_exact("40 100\r\n")
    child.expect_exact(PROMPT)
    # Ctrl-C is a keystroke: it interrupts the remote program, not the CLI
    child.send("echo started; sleep 600\r")
    child.expect_exact("started\r\n")
    child.sendcontrol("c")
    child.expect_exact(PROMPT)
    child.send('echo "after $?"\r')
    child.expect_exact("after 130\r\n")  # the shell survived; sleep died of SIGINT
    child.expect_exact(PROMPT)
    child.send("exit 3\r")
    assert finished(child) == 3


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_cli_restores_the_terminal_and_destroys_the_sandbox(
    emulator: Emulator, signum: signal.Signals
) -> None:
    before = set(emulator.live_sandboxes())
    child = spawn(["shell"], emulator_env(emulator, TERM="xterm"))
    at_prompt(child)
    assert len(set(emulator.live_sandboxes()) - before) == 1
    os.kill(cli_pid(child), signum)
    assert finished(child) == 128 + signum
    assert set(emulator.live_sandboxes()) == before  # destroyed (and no process left: fixture)


def test_a_failed_request_ends_the_session_restores_the_terminal_and_cleans_up(
    emulator: Emulator,
) -> None:
    before = set(emulator.live_sandboxes())
    child = spawn(["shell"], emulator_env(emulator, TERM="xterm"))
    at_prompt(child)
    emulator.faults.add(Fault("process.input", status=500))  # not retried: it may have typed
    child.send("echo lost\r")
    child.expect("error: HTTP 500")
    assert finished(child) == 1
    assert set(emulator.live_sandboxes()) == before


def test_shell_in_an_existing_sandbox_keeps_it(emulator: Emulator, client: cs.Client) -> None:
    with client.lease() as box:
        child = spawn(["shell", box.id], emulator_env(emulator, TERM="xterm"))
        at_prompt(child)
        # a relative path: in plain mode a typed /workspace would be the host's
        child.send("echo left-by-the-shell > mark; exit\r")
        assert finished(child) == 0
        assert box.info().status == "running"
        assert box.read_file("/workspace/mark") == b"left-by-the-shell\n"
        assert processes_of(emulator, box.id) == []  # the shell itself has ended


def test_shell_refuses_without_a_terminal_on_stdin(tmp_path: Path) -> None:
    done = subprocess.run(
        [*CLI, "shell", "--local"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=local_env(),
        timeout=DEADLINE,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    first, hint = done.stderr.splitlines()  # one line, then where to read more
    assert first.startswith("createos-sync: error: ") and "terminal" in first
    assert hint == "see `createos-sync shell --help`"


def test_run_tty_runs_on_a_terminal_of_the_window_size(emulator: Emulator) -> None:
    env = emulator_env(emulator, TERM="xterm")
    child = spawn(["run", "--tty", "--", "tty -s && stty size && echo $TERM"], env, size=(33, 77))
    # the remote terminal ends lines with \r\n, which the local one shows as \r\r\n
    child.expect(r"33 77\r+\nxterm\r+\n")
    assert finished(child) == 0
    piped = subprocess.run(
        [*CLI, "run", "--tty", "--", "tty -s && stty size; exit 5"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=env,
        timeout=DEADLINE,
    )
    assert (piped.returncode, piped.stdout) == (5, b"24 80\r\n")  # no window: 80x24


def test_run_tty_times_out_and_is_cleaned_up_on_a_signal_like_run(emulator: Emulator) -> None:
    env = emulator_env(emulator, TERM="xterm")
    before = set(emulator.live_sandboxes())
    child = spawn(["run", "--tty", "--", "echo started; exec sleep 600"], env)
    timed_out = subprocess.run(
        [*CLI, "run", "--tty", "--timeout", "3", "--", "echo before; exec sleep 60"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=env,
        timeout=DEADLINE,
    )
    assert (timed_out.returncode, timed_out.stdout) == (124, b"before\r\n")
    assert b"timed out after 3 s" in timed_out.stderr
    child.expect_exact("started")
    os.kill(cli_pid(child), signal.SIGTERM)
    assert finished(child) == 128 + signal.SIGTERM
    assert set(emulator.live_sandboxes()) == before
    assert emulator.live_processes() == []


def test_run_tty_reads_end_of_input_at_once_and_follows_the_window_size(
    emulator: Emulator,
) -> None:
    # bash runs a trap once a `wait` is interrupted (a `read` would hold it until a line comes)
    script = (
        "cat; echo got-eof; trap 'echo \"now $(stty size)\"; kill $!; exit 7' WINCH; "
        "sleep 600 & echo ready; wait"  # ready once `$!` is the sleep
    )
    before = set(emulator.live_sandboxes())
    child = spawn(
        ["run", "--tty", "--ttl", "0", "--", script], emulator_env(emulator, TERM="xterm")
    )
    child.expect_exact("got-eof")  # `cat` saw the end of its input: nobody types in `run`
    child.expect_exact("ready")
    (sandbox_id,) = set(emulator.live_sandboxes()) - before
    child.setwinsize(40, 100)  # SIGWINCH to the CLI, forwarded as a resize
    child.expect(r"now 40 100\r+\n")
    assert finished(child) == 7
    assert emulator.live_processes() == []
    # as terminals.md says: one request more than `run` (the Ctrl-D), and one for the resize
    requests = [op for op, _ in operations(emulator, sandbox_id) if op.startswith("process.")]
    assert requests == ["process.create", "process.connect"] + ["process.input"] * 2 + [
        "process.resize"
    ]


def test_run_tty_s_ctrl_d_to_a_command_that_has_ended_is_no_error(
    emulator: Emulator, box: cs.Lease
) -> None:
    ended = box.start("exit 5", pty=True)
    assert ended.wait(timeout=DEADLINE).exit_code == 5
    _run._type_end_of_input(ended)  # its terminal refuses the key (409): nothing to tell it
    # ... but a refusal while the command still runs is an error, said once it has had time to end
    running = box.start("sleep 600", pty=True)
    emulator.faults.add(Fault("process.input", status=409))
    with pytest.raises(cs.CreateosApiError, match="HTTP 409"):
        _run._type_end_of_input(running, ending=0.2)


def cli_pid(child: pexpect.spawn) -> int:
    """The CLI's process id: the one child of pexpect's ``sh``."""
    children = Path(f"/proc/{child.pid}/task/{child.pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])
