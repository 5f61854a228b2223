"""``createos-sync run`` copies its command's output byte for byte (issue 37), on a terminal
and off: a pipeline gets exactly what the command wrote."""

from __future__ import annotations

import io
import subprocess
import tarfile

from createos_sync.emulator import Emulator

from .subprocesses import CLI, DEADLINE, Terminal

BINARY = r"printf '\xff\xfe\x00\x01'; printf '\x80\xc3' >&2"


def test_run_copies_stdout_and_stderr_byte_for_byte_off_a_terminal(env: dict[str, str]) -> None:
    done = subprocess.run(
        [*CLI, "run", "--", BINARY], env=env, capture_output=True, timeout=DEADLINE
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"\xff\xfe\x00\x01", b"\x80\xc3")


def test_a_tarball_through_a_pipe_is_intact(env: dict[str, str]) -> None:
    script = "mkdir -p d && head -c 100000 /dev/urandom > d/noise && tar czf - d"
    done = subprocess.run(
        [*CLI, "run", "--", script], env=env, capture_output=True, timeout=DEADLINE
    )
    assert done.returncode == 0, done.stderr
    with tarfile.open(fileobj=io.BytesIO(done.stdout), mode="r:gz") as archive:
        noise = archive.getmember("d/noise")
    assert noise.size == 100_000


def test_run_copies_bytes_to_a_terminal_as_they_are(env: dict[str, str]) -> None:
    terminal = Terminal([*CLI, "run", "--", r"printf 'a\xff\xfe\x00\x01b'"], env)
    screen = terminal.read_until(b"b")
    status, _ = terminal.finish()
    assert status == 0 and b"a\xff\xfe\x00\x01b" in screen


def test_run_keep_prints_the_id_on_stdout_first(emulator: Emulator, env: dict[str, str]) -> None:
    done = subprocess.run(
        [*CLI, "run", "--keep", "--", "echo out"], env=env, capture_output=True, timeout=DEADLINE
    )
    kept, output = done.stdout.decode().split("\n", 1)
    try:
        assert done.returncode == 0 and output == "out\n"
        assert (
            kept in emulator.live_sandboxes() and f"keeping sandbox {kept}" in done.stderr.decode()
        )
    finally:
        subprocess.run([*CLI, "destroy", kept], env=env, capture_output=True, timeout=DEADLINE)
