"""The lease's command session: one request per run(), every promise of run() kept."""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import os
import secrets
import signal
import threading
import time

import pytest

import createos_sync as cs
from createos_sync import Lease
from createos_sync._commands import framing as _framing
from createos_sync._commands import session as _session
from createos_sync.emulator import Emulator, Fault

from .helpers import MIXED_LINE_BYTES, MIXED_OUTPUT_SCRIPT, mixed_output, operations, processes_of


def sha256(data: str | bytes) -> str:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()


def test_the_first_run_starts_the_session_and_every_later_one_is_one_request(
    emulator: Emulator, box: Lease
) -> None:
    emulator.clear_request_log()
    box.run("true", check=True)
    assert operations(emulator) == [
        ("process.create", 200),
        ("process.connect", 200),
        ("process.input", 200),
    ]

    emulator.clear_request_log()
    box.run("true", check=True)
    assert operations(emulator) == [("process.input", 200)]


def test_mixed_commands_cost_one_request_each(emulator: Emulator, box: Lease) -> None:
    box.run("true", check=True)
    emulator.clear_request_log()

    assert box.run("exit 7").exit_code == 7
    assert box.run("echo err >&2").stderr == "err\n"
    assert box.run("echo $A", env={"A": "x y"}).stdout == "x y\n"
    assert box.run("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert box.run("pwd").stdout != "/tmp\n"  # cwd does not carry over
    assert box.run("echo ${A-unset}").stdout == "unset\n"  # nor does env
    assert box.run("cat", stdin=b"in\x00put").stdout == "in\x00put"
    assert box.run(["printf", "%s|", "a b", "$HOME", "'"]).stdout == "a b|$HOME|'|"

    assert operations(emulator) == [("process.input", 200)] * 8


def test_a_forged_end_record_is_output(box: Lease) -> None:
    guess = secrets.token_hex(16)
    script = f"printf 'a\\000\\036{guess} x 0\\nb'; printf '\\000\\036{guess}\\n' >&2; exit 5"

    result = box.run(script)

    assert result.exit_code == 5
    assert result.stdout == f"a\x00\x1e{guess} x 0\nb"
    assert result.stderr == f"\x00\x1e{guess}\n"


def test_a_command_reading_stdin_forever_sees_its_end_at_once(box: Lease) -> None:
    result = box.run("cat; read -r line; echo done $?", timeout=20)

    assert (result.stdout, result.timed_out) == ("done 1\n", False)


def test_stdin_is_exact_bytes(box: Lease) -> None:
    data = bytes(range(256)) * 20

    result = box.run("od -An -v -tx1 | tr -d ' \\n'", stdin=data)

    assert result.stdout == data.hex()


def test_binary_output_passes_through_the_session_unchanged(box: Lease) -> None:
    # Every byte value, the record prefix included: nothing in the framing assumes text.
    seen: list[tuple[str, str]] = []
    result = box.run(
        "printf '\\000\\036\\377\\376'; head -c 300000 /dev/urandom | od -An -v -tx1 | wc -l",
        on_output=lambda *call: seen.append(call),
    )

    assert result.exit_code == 0
    assert result.stdout.startswith("\x00\x1e\ufffd\ufffd")
    assert "".join(text for stream, text in seen if stream == "stdout") == result.stdout


def test_a_command_closing_or_redirecting_its_descriptors_ends_normally(box: Lease) -> None:
    assert box.run("exec >&- 2>&- <&-; exit 4").exit_code == 4
    assert box.run("exec 3>&1 1>/dev/null; echo hidden; echo shown >&3").stdout == "shown\n"
    assert box.run("echo next").stdout == "next\n"


def test_a_command_removing_the_session_directory_harms_no_later_command(box: Lease) -> None:
    removed = box.run('rm -rf -- "${TMPDIR:-/tmp}"/.createos_sync_session.*; echo gone')

    assert removed.stdout == "gone\n"
    assert box.run("echo next; echo err >&2").stdout == "next\n"
    assert box.run("cat", stdin=b"in").stdout == "in"


def test_a_background_child_ending_the_next_commands_prepared_processes_harms_it_not(
    emulator: Emulator, box: Lease
) -> None:
    # The watcher makes the next command's relays (cat) and process ahead, once a command is
    # over: a child left behind kills them before the next command comes; it is made again.
    box.run("(sleep 0.5; pkill -KILL -x cat) >/dev/null 2>&1 &")
    time.sleep(1.5)
    emulator.clear_request_log()

    result = box.run("echo next; echo err >&2; exit 137")

    # its exit status too: no notice of the slot's ended process passes for its own
    assert (result.stdout, result.stderr, result.exit_code) == ("next\n", "err\n", 137)
    assert result.signal is None
    assert operations(emulator) == [("process.input", 200)]


def test_a_background_child_killing_the_idle_watcher_harms_no_later_command(
    emulator: Emulator, box: Lease
) -> None:
    # The watcher (the command's parent) outlives the command: killed while idle, the
    # supervisor starts another for the next command, in the same session.
    box.run("w=$PPID; (sleep 0.5; kill -KILL $w) >/dev/null 2>&1 &")
    time.sleep(1.5)
    emulator.clear_request_log()

    assert box.run("cat", stdin=b"in").stdout == "in"
    assert box.run("exit 3").exit_code == 3
    assert operations(emulator) == [("process.input", 200)] * 2


def test_exec_of_another_program_keeps_its_status_and_output(box: Lease) -> None:
    result = box.run("exec sh -c 'echo from sh; kill -TERM $$'")

    assert (result.stdout, result.signal, result.exit_code) == ("from sh\n", "SIGTERM", None)
    assert box.run("exit 143").exit_code == 143  # an exit code is not a signal


def test_kill_everything_raises_the_loss_and_the_next_command_runs(
    emulator: Emulator, box: Lease
) -> None:
    with pytest.raises(cs.OutputLostError, match="killed the session's supervisor") as caught:
        box.run("kill -9 -1; sleep 1; echo survived")

    assert caught.value.result is not None
    assert processes_of(emulator, box.id) == []
    assert box.run("echo next").stdout == "next\n"


def test_a_command_killing_the_process_that_watches_it(emulator: Emulator, box: Lease) -> None:
    with pytest.raises(cs.OutputLostError, match="killed the session's supervisor"):
        box.run("kill -9 $PPID; sleep 1000", timeout=60)

    assert processes_of(emulator, box.id) == []
    assert box.run("echo next").stdout == "next\n"


def test_timeout_ends_setsid_and_double_forks_and_confirms_it(
    emulator: Emulator, box: Lease
) -> None:
    box.run("true")
    emulator.clear_request_log()

    result = box.run("echo started; setsid sleep 1000 & (sleep 1000 &) ; sleep 1000", timeout=3)

    assert (result.timed_out, result.stdout) == (True, "started\n")
    assert processes_of(emulator, box.id) == []
    kinds = [name for name, _ in operations(emulator)]
    assert kinds.count("process.input") == 2  # the command, then ending it
    assert "process.delete" not in kinds
    assert box.run("echo after").stdout == "after\n"


def test_timeout_ends_a_child_that_clears_its_env_and_leaves_the_group(
    emulator: Emulator, box: Lease
) -> None:
    # Neither the command's process group nor its env marker finds it: its parent (the
    # command's shell, still running at the timeout) and the pipes it holds do.
    box.run("true")
    emulator.clear_request_log()
    held = str(10**6 + secrets.randbelow(10**6))  # its argv, to find it among the host's
    redirected = str(int(held) + 1)

    result = box.run(
        f"env -i setsid sleep {held} & env -i setsid sleep {redirected} >/dev/null 2>&1 &"
        " echo started; sleep 1000",
        timeout=3,
    )

    assert (result.timed_out, result.stdout) == (True, "started\n")
    assert _sleeping(emulator, box.id, held, redirected) == []
    kinds = [name for name, _ in operations(emulator)]
    assert kinds.count("process.input") == 2  # the command, then ending it: confirmed
    assert "process.delete" not in kinds  # not by terminating the whole session
    assert box.run("echo after").stdout == "after\n"


def test_a_child_that_clears_its_env_and_leaves_the_group_is_cut_from_the_output(
    emulator: Emulator, box: Lease
) -> None:
    # It holds the command's output pipes after the command ended: the relays are cut after
    # 0.2 s (it lives on, as any background child), and the command ends normally.
    held = str(10**6 + secrets.randbelow(10**6))

    result = box.run(f"env -i setsid sleep {held} & echo fg", timeout=30)

    assert (result.exit_code, result.stdout, result.timed_out) == (0, "fg\n", False)
    assert box.run("echo after").stdout == "after\n"
    box.run(f"pkill -f 'sleep {held}'; true")


def test_the_session_directory_stays_small_over_many_commands(box: Lease) -> None:
    # Each command leaves two small files (its pid, its end mark); once in 64 commands the
    # supervisor removes the older ones: at most about two for each of the last 65 commands.
    for i in range(140):
        box.run("(sleep 0.3; echo late) & echo now" if i % 30 == 0 else "true")

    listed = box.run('ls -A "${TMPDIR:-/tmp}"/.createos_sync_session.*/').stdout.split()

    assert 0 < len(listed) < 2 * 65 + 16, len(listed)


def _sleeping(emulator: Emulator, sandbox_id: str | None, *durations: str) -> list[int]:
    """The host pids of the sandbox's processes running ``sleep DURATION`` (any of them)."""
    wanted = {b"sleep\x00" + duration.encode() + b"\x00" for duration in durations}
    found = []
    for live in emulator.live_processes():
        if live.sandbox_id != sandbox_id:
            continue
        for pid in live.pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    if cmdline.read() in wanted:
                        found.append(pid)
            except OSError:
                continue
    return found


def test_a_background_child_keeps_running_and_writes_into_no_later_command(box: Lease) -> None:
    result = box.run("(for i in $(seq 50); do echo bg; sleep 0.1; done) & echo fg")

    assert result.stdout.startswith("fg\n")
    later = box.run("sleep 1; echo later")
    assert later.stdout == "later\n"


def test_a_dropped_stream_mid_command_resumes_without_loss(emulator: Emulator, box: Lease) -> None:
    box.run("true")
    session = _session._slot(box._usable_box()).session
    assert session is not None
    lines = 1_000_000 // MIXED_LINE_BYTES
    expected_out, expected_err = mixed_output(lines)
    drops = []

    def drop_once(stream: str, text: str) -> None:  # the connection breaks mid-command
        if not drops:
            drops.append(stream)
            session.stream.close()
            emulator.faults.add(Fault("process.connect", drop_after_frames=3))

    emulator.clear_request_log()
    result = box.run(
        ["python3", "-c", MIXED_OUTPUT_SCRIPT, str(lines)], on_output=drop_once, check=True
    )

    assert sha256(result.stdout) == sha256(expected_out)
    assert sha256(result.stderr) == sha256(expected_err)
    connects = [name for name, _ in operations(emulator)].count("process.connect")
    assert connects == 2  # dropped by the client, then by the fault after 3 frames


def test_threads_sharing_a_lease_each_get_their_own_result(box: Lease) -> None:
    barrier = threading.Barrier(4)

    def one(n: int) -> tuple[int, str, int | None]:
        barrier.wait()
        result = box.run(f"echo {n}; exit {n}", env={"N": str(n)})
        return n, result.stdout, result.exit_code

    with cf.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(4)))

    assert results == [(n, f"{n}\n", n) for n in range(4)]


def test_interrupt_ends_the_tree_then_reraises(emulator: Emulator, box: Lease) -> None:
    box.run("true")

    def interrupt(stream: str, text: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        box.run("echo go; setsid sleep 1000 & sleep 1000", on_output=interrupt)

    assert processes_of(emulator, box.id) == []
    assert box.run("echo after").stdout == "after\n"


def test_the_session_is_off_with_the_switch(
    emulator: Emulator, box: Lease, managed_path: None
) -> None:
    emulator.clear_request_log()
    box.run("true")
    box.run("true")

    assert [name for name, _ in operations(emulator)].count("process.create") == 2


def test_a_second_interrupt_while_ending_the_command_destroys_the_sandbox(
    emulator: Emulator, client: cs.Client
) -> None:
    box = client.lease().open()
    sandbox_id = box.id
    box.run("true")

    def interrupt(stream: str, text: str) -> None:
        # The request that ends the command hangs; a second Ctrl-C arrives meanwhile.
        emulator.faults.add(Fault("process.input", delay=10.0))
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        raise KeyboardInterrupt

    try:
        with pytest.raises(KeyboardInterrupt):
            box.run("echo go; setsid sleep 1000 & sleep 1000", on_output=interrupt)
        assert sandbox_id not in emulator.live_sandboxes()
        assert processes_of(emulator, sandbox_id) == []
    finally:
        emulator.faults.clear()
        box.close()


def test_a_session_stream_that_keeps_dropping_raises_and_leaves_nothing_running(
    emulator: Emulator, box: Lease
) -> None:
    box.run("true")
    session = _session._slot(box._usable_box()).session
    assert session is not None

    def drop(stream: str, text: str) -> None:  # from now on, every connection breaks
        session.stream.close()
        emulator.faults.add(Fault("process.connect", drop_after_frames=0, times=1000))

    with pytest.raises(cs.CreateosApiError, match="stream"):
        box.run("setsid sleep 1000 & while :; do echo x; sleep 0.1; done", on_output=drop)
    emulator.faults.clear()

    assert processes_of(emulator, box.id) == []  # the session was terminated, confirmed
    assert box.run("echo next").stdout == "next\n"  # in a new one


def test_the_token_is_nowhere_a_command_can_read_it(
    box: Lease, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens: list[str] = []
    new_token = _framing.new_token
    monkeypatch.setattr(_framing, "new_token", lambda: tokens.append(new_token()) or tokens[-1])
    script = (
        "for p in $PPID $(cut -d' ' -f4 /proc/$PPID/stat); do"
        " cat /proc/$p/cmdline /proc/$p/environ; ls -l /proc/$p/fd; done;"
        ' for f in "${TMPDIR:-/tmp}"/.createos_sync_session.*/*; do'
        ' [ -f "$f" ] && cat "$f"; done; true'
    )

    result = box.run(script, timeout=30)

    assert result.exit_code == 0 and result.stdout
    assert tokens and not any(token in result.stdout + result.stderr for token in tokens)


def test_a_lone_surrogate_is_refused_before_any_request(emulator: Emulator, box: Lease) -> None:
    box.run("true")
    emulator.clear_request_log()

    with pytest.raises(ValueError, match="lone surrogate"):
        box.run("echo $V", env={"V": "a\ud800"})

    assert operations(emulator) == []
    assert box.run("cat", stdin="x\udcff").stdout == "x\ufffd"  # an escaped byte is a byte


def test_a_session_ended_while_idle_is_replaced_and_the_command_runs_once(
    emulator: Emulator, box: Lease
) -> None:
    # A background child of one command kills the supervisor once that command is over.
    box.run("(sleep 0.5; kill -9 $(cut -d' ' -f4 /proc/$PPID/stat)) >/dev/null 2>&1 &")
    time.sleep(2)
    emulator.clear_request_log()

    result = box.run("echo once >> /workspace/count; cat /workspace/count")

    assert result.stdout == "once\n"
    assert [name for name, _ in operations(emulator)].count("process.create") == 1


@pytest.mark.parametrize("status", [400, 502])
def test_an_input_refusal_echoing_the_command_shows_none_of_its_secrets(
    emulator: Emulator, box: Lease, status: int
) -> None:
    secret = "session-secret-" + secrets.token_hex(8)
    box.run("true")
    emulator.faults.add(
        Fault("process.input", status=status, message=f"refused: export TOKEN={secret}")
    )

    with pytest.raises(cs.CreateosApiError) as caught:
        box.run("echo $TOKEN", env={"TOKEN": secret})

    shown = " ".join(
        [str(caught.value), repr(caught.value), *getattr(caught.value, "__notes__", [])]
    )
    assert secret not in shown
    assert box.run("echo ok").stdout == "ok\n"
