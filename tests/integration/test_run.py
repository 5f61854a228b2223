"""``Lease.run`` end to end: real processes in the emulator, over real HTTP.

Every figure here is checked against what the process really did: exit
statuses, bytes printed back as JSON from inside the sandbox, and sha256
checksums of tens of megabytes of output.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator

import pytest

import createos_sync as cs
from createos_sync import Client, Lease
from createos_sync.emulator import Emulator

from .helpers import (
    FAST,
    MIXED_LINE_BYTES,
    MIXED_OUTPUT_SCRIPT,
    StreamHasher,
    mixed_output,
    operations,
    own_emulator,
    processes_of,
    sha256,
)

ECHO_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"
ECHO_ENV = "import json, os, sys; print(json.dumps({k: os.environ.get(k) for k in sys.argv[1:]}))"
STDIN_SHA256 = "import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())"

HOSTILE = [
    "",
    " ",
    "plain",
    "two words",
    "'single quotes'",
    '"double quotes"',
    "it's",
    "'\\''",
    "$(touch pwned-by-substitution)",
    "`touch pwned-by-backticks`",
    "${HOME}",
    "$HOME",
    "a;touch pwned-by-semicolon",
    "| cat",
    "&& true",
    "x > redirected",
    "*",
    "?",
    "~",
    "!!",
    "back\\slash\\",
    "line\nbreak\n",
    "\n",
    "tab\tand\rcarriage return",
    "-n",
    "-e",
    "--help",
    "--",
    "-",
    "ünïcødé ✓ 日本語 🎉 \U0001d11e e\u0301",
    "\x01\x1b[31mcontrol\x7f",
]


# --- exit statuses ---------------------------------------------------------


@pytest.mark.parametrize("code", [0, 1, 255])
def test_exit_code_is_reported(box: Lease, code: int) -> None:
    result = box.run(f"exit {code}")

    assert result.exit_code == code
    assert result.returncode == code
    assert result.signal is None
    assert result.timed_out is False
    assert result.ok is (code == 0)
    assert result.process_id


def test_check_raises_command_failed_with_the_result(box: Lease) -> None:
    with pytest.raises(cs.CommandFailed) as caught:
        box.run("echo out; echo err >&2; exit 3", check=True)

    result = caught.value.result
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert not isinstance(caught.value, cs.CommandTimeout)


@pytest.fixture(scope="module")
def plain_emulator() -> Iterator[Emulator]:
    """No bubblewrap: the leader's own wait status reaches the emulator unchanged."""
    with own_emulator(isolation="none") as emu:
        yield emu


@pytest.fixture(params=["session", "plain"])
def any_box(
    request: pytest.FixtureRequest, emulator: Emulator, plain_emulator: Emulator
) -> Iterator[tuple[Emulator, Lease]]:
    emu = emulator if request.param == "session" else plain_emulator
    with emu.client(requests_per_minute=FAST) as client, client.lease() as lease:
        yield emu, lease


@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGTERM"])
def test_command_killed_by_a_signal_reports_the_signal(
    any_box: tuple[Emulator, Lease], signal_name: str
) -> None:
    # Under bubblewrap, its own init passes a death by signal N on as exit status
    # 128+N: the emulator must find out the leader's real wait status instead.
    _, lease = any_box
    result = lease.run(f"echo before; kill -{signal_name[3:]} $$; echo after")

    assert result.stdout == "before\n"
    assert result.signal == signal_name
    assert result.exit_code is None
    assert result.returncode is None
    assert result.ok is False
    with pytest.raises(cs.CommandFailed, match=signal_name):
        result.check()


# --- what reaches the process ----------------------------------------------


def test_str_is_a_bash_script_and_a_list_is_argv(box: Lease) -> None:
    script = box.run("x=$((6 * 7)); echo $x | tr 4 X; echo *.none")
    argv = box.run(["echo", "$((6 * 7))", "|", "tr", "4", "X", ";", "*.none"])

    assert script.stdout == "X2\n*.none\n"
    assert argv.stdout == "$((6 * 7)) | tr 4 X ; *.none\n"


def test_hostile_argv_reaches_the_process_byte_exact(box: Lease) -> None:
    result = box.run(["python3", "-c", ECHO_ARGV, *HOSTILE], check=True)

    assert json.loads(result.stdout) == HOSTILE
    probe = box.run("ls pwned-* redirected 2>/dev/null; true")
    assert probe.stdout == "", "a hostile argument was interpreted by a shell"


def test_hostile_env_values_reach_the_process_byte_exact(box: Lease) -> None:
    env = {f"HOSTILE_{i}": value for i, value in enumerate(HOSTILE)}
    env["PATH_LIKE"] = "/nowhere:$PATH"

    result = box.run(["python3", "-c", ECHO_ENV, *env], env=env, check=True)

    assert json.loads(result.stdout) == env
    assert box.run("ls pwned-* redirected 2>/dev/null; true").stdout == ""


def test_env_applies_to_a_bash_script_too(box: Lease) -> None:
    result = box.run('printf "%s|%s" "$GREETING" "$OTHER"', env={"GREETING": "hi 'there'"})

    assert result.stdout == "hi 'there'|"


def test_cwd_with_spaces(box: Lease) -> None:
    workspace = box.run("pwd", check=True).stdout.rstrip("\n")
    box.run(["mkdir", "-p", "a dir/with 'quotes' & more"], check=True)
    target = f"{workspace}/a dir/with 'quotes' & more"

    result = box.run("pwd; touch here", cwd=target, check=True)

    assert result.stdout == target + "\n"
    assert box.run(["ls", target]).stdout == "here\n"


def test_missing_cwd_fails_the_command_not_the_lease(box: Lease) -> None:
    result = box.run("echo never", cwd="/no/such dir")

    assert result.exit_code == 1
    assert result.stdout == ""
    assert box.run("echo still usable").stdout == "still usable\n"


# --- stdin -----------------------------------------------------------------


STDIN_BYTES = bytes(range(256)) * 64 + "héllo\n".encode()


@pytest.mark.parametrize("kind", ["bytes", "binary-file-object"])
def test_binary_stdin_reaches_the_process_byte_exact(box: Lease, kind: str) -> None:
    stdin = STDIN_BYTES if kind == "bytes" else io.BytesIO(STDIN_BYTES)

    result = box.run(["python3", "-c", STDIN_SHA256], stdin=stdin, check=True)

    assert result.stdout == sha256(STDIN_BYTES) + "\n"


def test_stdin_from_a_real_file(box: Lease, tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "input.bin")
    with open(path, "wb") as f:
        f.write(os.urandom(300_000))
    with open(path, "rb") as f:
        expected = sha256(f.read())

    with open(path, "rb") as f:
        result = box.run(["python3", "-c", STDIN_SHA256], stdin=f, check=True)

    assert result.stdout == expected + "\n"


def test_text_stdin(box: Lease) -> None:
    text = "first line\nünïcødé 🎉\n$(not a command)\n"

    result = box.run("cat", stdin=text, check=True)

    assert result.stdout == text


def test_stdin_works_with_and_without_bubblewrap(any_box: tuple[Emulator, Lease]) -> None:
    # Without bubblewrap a command's /tmp is the host's, while the files API writes
    # into the sandbox's storage: staging stdin must not rely on /tmp meaning both.
    _, lease = any_box

    result = lease.run("cat", stdin="staged input\n")

    assert (result.exit_code, result.stdout, result.stderr) == (0, "staged input\n", "")


def test_no_stdin_is_an_empty_stdin(box: Lease) -> None:
    result = box.run("cat; echo end", timeout=30)

    assert result.timed_out is False
    assert (result.exit_code, result.stdout) == (0, "end\n")


def test_stdin_is_staged_not_put_in_the_command_line(box: Lease, managed_path: None) -> None:
    secret = "stdin-secret-0123456789"

    result = box.run("cat", stdin=secret, check=True)

    assert result.stdout == secret
    created = box.process(result.process_id)  # the record of the process as created
    assert created.wait(timeout=30).stdout == secret
    assert secret not in " ".join(created.args)
    assert box.run("ls -A /tmp | grep -c createos-sync-stdin; true").stdout == "0\n"


# --- output ----------------------------------------------------------------


def test_tens_of_megabytes_of_mixed_output_arrive_intact(box: Lease) -> None:
    lines = -(-30_000_000 // MIXED_LINE_BYTES)
    expected_out, expected_err = mixed_output(lines)
    assert len(expected_out) + len(expected_err) >= 30_000_000

    result = box.run(
        ["python3", "-c", MIXED_OUTPUT_SCRIPT, str(lines)],
        max_output=64 * 1024 * 1024,
        timeout=120,
        check=True,
    )

    assert result.truncated is False
    assert sha256(result.stdout) == sha256(expected_out)
    assert sha256(result.stderr) == sha256(expected_err)


def test_small_max_output_keeps_the_tail_while_on_output_sees_everything(box: Lease) -> None:
    lines = 6_000_000 // MIXED_LINE_BYTES
    expected_out, expected_err = mixed_output(lines)
    seen = StreamHasher()

    result = box.run(
        ["python3", "-c", MIXED_OUTPUT_SCRIPT, str(lines)],
        max_output=1000,
        on_output=seen,
        timeout=120,
        check=True,
    )

    assert result.truncated is True
    assert result.stdout == expected_out.decode("utf-8")[-1000:]
    assert result.stderr == expected_err.decode("utf-8")[-1000:]
    assert seen.digest("stdout") == sha256(expected_out)
    assert seen.digest("stderr") == sha256(expected_err)


def test_on_output_is_called_in_order_per_stream(box: Lease) -> None:
    calls: list[tuple[str, str]] = []

    result = box.run(
        "for i in 1 2 3; do echo out$i; echo err$i >&2; done", on_output=lambda *c: calls.append(c)
    )

    assert "".join(t for s, t in calls if s == "stdout") == result.stdout == "out1\nout2\nout3\n"
    assert "".join(t for s, t in calls if s == "stderr") == result.stderr == "err1\nerr2\nerr3\n"


@pytest.fixture(scope="module")
def small_journal() -> Iterator[Emulator]:
    """An emulator whose output journal holds only 64 KiB per process."""
    with own_emulator(journal_bytes=64 * 1024, frame_bytes=16 * 1024) as emu:
        yield emu


@pytest.fixture
def small_box(small_journal: Emulator) -> Iterator[Lease]:
    with small_journal.client(requests_per_minute=FAST) as client, client.lease() as lease:
        yield lease


def test_fast_command_writing_more_than_the_journal_holds_loses_nothing(
    small_box: Lease, managed_path: None
) -> None:
    # ~5 MB at once, over 75 times the journal, written before any output could be read
    # were it not for the start gate.
    lines = 5_000_000 // MIXED_LINE_BYTES
    expected_out, expected_err = mixed_output(lines)

    result = small_box.run(
        ["python3", "-c", MIXED_OUTPUT_SCRIPT, str(lines)], max_output=16 * 1024 * 1024
    )

    assert result.exit_code == 0
    assert sha256(result.stdout) == sha256(expected_out)
    assert sha256(result.stderr) == sha256(expected_err)
    # The control: replaying the same process from the start now finds its
    # first frames evicted, so the journal really was too small to hold it all.
    with pytest.raises(cs.OutputLostError, match="the journal evicted them before they were read"):
        small_box.process(result.process_id).wait(timeout=30)


# --- timeouts and interrupts -----------------------------------------------


def test_timeout_terminates_the_whole_tree_and_keeps_partial_output(
    emulator: Emulator, box: Lease
) -> None:
    result = box.run("echo partial; echo oops >&2; sleep 1000 & sleep 1000 & wait", timeout=4.0)

    assert result.timed_out is True
    assert result.exit_code is None
    assert (result.stdout, result.stderr) == ("partial\n", "oops\n")
    assert processes_of(emulator, box.id) == []
    with pytest.raises(cs.CommandTimeout) as caught:
        result.check()
    assert isinstance(caught.value, TimeoutError)
    assert box.run("echo after").stdout == "after\n"


def test_keyboard_interrupt_in_on_output_terminates_the_remote_tree(
    emulator: Emulator, box: Lease
) -> None:
    def interrupt(stream: str, text: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        box.run("echo started; sleep 1000 & sleep 1000 & wait", on_output=interrupt, timeout=60)

    assert processes_of(emulator, box.id) == []
    assert box.run("echo usable").stdout == "usable\n"


# --- request budget (docs/reference/request-costs.md) -------------------------


def test_run_true_costs_exactly_three_requests_as_a_managed_process(
    emulator: Emulator, box: Lease, managed_path: None
) -> None:
    emulator.clear_request_log()

    box.run("true", check=True)

    assert operations(emulator) == [
        ("process.create", 200),
        ("process.connect", 200),
        ("process.stdin_close", 200),
    ]


def test_run_with_stdin_costs_exactly_four_requests_as_a_managed_process(
    emulator: Emulator, box: Lease, managed_path: None
) -> None:
    emulator.clear_request_log()

    result = box.run("cat", stdin=b"x", check=True)

    assert result.stdout == "x"
    assert operations(emulator) == [
        ("file.write", 200),
        ("process.create", 200),
        ("process.connect", 200),
        ("process.stdin_close", 200),
    ]


def test_a_command_too_long_for_an_argument_is_staged_as_a_file(
    emulator: Emulator, box: Lease
) -> None:
    chunk = "x" * (64 * 1024)  # 1 MiB of argv: far over one argument's 128 KiB
    emulator.clear_request_log()

    result = box.run(["printf", "%s", *([chunk] * 16)], check=True)

    assert result.stdout == chunk * 16
    assert operations(emulator) == [
        ("file.write", 200),
        ("process.create", 200),
        ("process.connect", 200),
        ("process.stdin_close", 200),
    ]
    # the staged script removed itself (the lease's command session keeps a hidden directory)
    assert box.run("ls -A /tmp | grep -v '^.createos_sync_session'; true").stdout == ""


def test_invalid_arguments_send_no_request(emulator: Emulator, box: Lease) -> None:
    emulator.clear_request_log()

    with pytest.raises(ValueError, match="argv item 1 contains a NUL character"):
        box.run(["echo", "nul\0byte"])
    with pytest.raises(ValueError, match="invalid environment variable name 'BAD-NAME'"):
        box.run("true", env={"BAD-NAME": "x"})
    with pytest.raises(ValueError, match="cwd contains a NUL character"):
        box.run("true", cwd="/tmp\0x")
    with pytest.raises(TypeError, match="stdin must be str, bytes, a binary file object or None"):
        box.run("cat", stdin=12)  # type: ignore[arg-type]

    assert operations(emulator) == []


def test_two_open_leases_of_one_client_keep_their_files_apart(client: Client) -> None:
    with client.lease() as first, client.lease() as second:
        assert first.id != second.id
        first.write_file("/workspace/which", b"first")
        second.write_file("/workspace/which", b"second")
        assert first.run("cat which").stdout == "first"
        assert second.run("cat which").stdout == "second"
