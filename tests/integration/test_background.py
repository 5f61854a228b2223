"""Background processes (``Lease.start`` / ``Lease.process``) on the emulator, real processes."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import createos_sync as cs
from createos_sync.emulator import Emulator
from createos_sync.process import Process

from ..waiting import wait_until

# Waits, without any timing, until the test creates the file `go` in /workspace.
UNTIL_GO = "while [ ! -e go ]; do sleep 0.02; done"


def take(output: Iterator[tuple[str, str]], stdout: str = "", stderr: str = "") -> None:
    """Consume ``output`` until exactly ``stdout`` and ``stderr`` have been seen."""
    seen = {"stdout": "", "stderr": ""}
    want = {"stdout": stdout, "stderr": stderr}
    while seen != want:
        stream, text = next(output)
        seen[stream] += text
        assert want[stream].startswith(seen[stream]), seen


def tree_alive(emulator: Emulator, process: Process) -> bool:
    return any(p.process_id == process.id for p in emulator.live_processes())


def test_output_is_consumed_while_the_process_runs(box: cs.Lease) -> None:
    seen: list[tuple[str, str]] = []
    process = box.start(
        'echo one; echo two >&2; read reply; echo "got $reply"',
        on_output=lambda stream, text: seen.append((stream, text)),
    )
    output = process.output()
    take(output, stdout="one\n", stderr="two\n")
    assert process.running  # blocked on `read` until we send
    process.send("go\n")
    take(output, stdout="got go\n")
    assert list(output) == []  # ends with the process
    result = process.wait()
    assert (result.exit_code, result.stdout, result.stderr) == (0, "one\ngot go\n", "two\n")
    assert not process.running
    assert "".join(text for stream, text in seen if stream == "stdout") == "one\ngot go\n"


def test_send_and_close_stdin_to_an_interactive_process(box: cs.Lease) -> None:
    upper = "import sys\nfor line in sys.stdin: print(line.strip().upper(), flush=True)"
    process = box.start(["python3", "-c", upper])
    output = process.output()
    process.send("hello\n")
    take(output, stdout="HELLO\n")
    process.send(b"bye\n")
    process.close_stdin()
    result = process.wait(timeout=60)
    assert (result.exit_code, result.stdout) == (0, "HELLO\nBYE\n")
    with pytest.raises(ValueError, match="stdin is closed"):
        process.send("late\n")


def test_wait_with_a_timeout_leaves_the_process_running(emulator: Emulator, box: cs.Lease) -> None:
    process = box.start(f"{UNTIL_GO}; exit 7")
    with pytest.raises(cs.OperationTimeout, match=r"did not finish within 0\.05 s"):
        process.wait(timeout=0.05)
    assert process.running and tree_alive(emulator, process)
    box.write_file("/workspace/go", b"")
    assert process.wait(timeout=60).exit_code == 7


def test_terminate_and_kill_end_the_whole_tree(emulator: Emulator, box: cs.Lease) -> None:
    polite = box.start("sleep 600 & sleep 600 & echo ready; wait")
    stubborn = box.start("trap '' TERM; sleep 600 & sleep 600 & echo ready; wait")
    for process in (polite, stubborn):
        take(process.output(), stdout="ready\n")  # the trees (and the trap) are in place
    polite.terminate(grace=20)  # ample: a loaded machine must not turn it into SIGKILL
    stubborn.kill()
    assert not tree_alive(emulator, polite) and not tree_alive(emulator, stubborn)
    assert polite.wait(timeout=60).signal == "SIGTERM"
    killed = stubborn.wait(timeout=60)
    assert (killed.signal, killed.exit_code, killed.timed_out) == ("SIGKILL", None, False)
    ours = {p.process_id for p in emulator.live_processes()} & {polite.id, stubborn.id}
    assert ours == set()  # the lease's own ttl watchdog is all that still runs


def test_reattach_after_the_first_handle_is_dropped_replays_the_output(
    emulator: Emulator, box: cs.Lease
) -> None:
    first = box.start(f"echo first; {UNTIL_GO}; echo second; exit 4")
    take(first.output(), stdout="first\n")
    process_id = first.id
    del first
    gc.collect()

    again = box.process(process_id)
    assert again.id == process_id and again.running
    output = again.output()
    take(output, stdout="first\n")  # replayed from the journal
    box.write_file("/workspace/go", b"")
    take(output, stdout="second\n")
    result = again.wait(timeout=60)
    assert (result.exit_code, result.stdout) == (4, "first\nsecond\n")

    finished = box.process(process_id)  # a finished process can be read again too
    assert finished.wait(timeout=60).stdout == "first\nsecond\n"
    with pytest.raises(cs.CreateosApiError, match="has no process proc-does-not-exist") as lost:
        box.process("proc-does-not-exist")
    assert lost.value.status == 404 and not isinstance(lost.value, cs.SandboxUnavailable)


def test_a_reattached_process_reports_the_users_command(box: cs.Lease) -> None:
    first = box.start(["echo", "hi"])
    first.wait(timeout=60)
    assert box.process(first.id).args == ("echo", "hi")


def test_close_terminates_unfinished_processes(emulator: Emulator, client: cs.Client) -> None:
    with client.lease() as box:
        lone = box.start("sleep 600")
        tree = box.start("sleep 600 & sleep 600 & wait")
        done = box.start("echo finished")
        assert done.wait(timeout=60).ok
        wait_until(lambda: tree_alive(emulator, lone) and tree_alive(emulator, tree), "trees run")
    assert emulator.live_processes() == []
    assert box.id not in emulator.live_sandboxes()
    for process in (lone, tree):
        result = process.wait(timeout=60)
        assert result.timed_out and result.exit_code is None
    finished = done.wait(timeout=60)  # it exited on its own: closing does not change that
    assert finished.ok and not finished.timed_out


def test_terminate_right_after_start_is_a_sigterm_not_a_kill_after_grace(box: cs.Lease) -> None:
    # Sent at once, SIGTERM reaches the command even while its sandbox is still starting
    # (a lost SIGTERM would mean waiting out the grace period, then SIGKILL).
    for _ in range(3):
        process = box.start("sleep 600")
        process.terminate(grace=60)
        assert process.wait(timeout=60).signal == "SIGTERM"


def test_poll_and_returncode_answer_as_popen_does(box: cs.Lease) -> None:
    process = box.start(f"{UNTIL_GO}; exit 3", cwd="/workspace")
    assert (process.poll(), process.returncode) == (None, None)  # still running: no request
    box.write_file("/workspace/go", b"")
    process.wait()
    assert (process.poll(), process.returncode) == (3, 3)
    killed = box.start("kill -9 $$")
    killed.wait()
    assert killed.poll() == killed.returncode == -9  # Popen's -N; RunResult.returncode is None
