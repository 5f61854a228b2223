"""The emulator without isolation (forced with ``isolation="none"``): nothing escapes, and
the sandbox's paths mean the same to commands as to the files API."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from createos_sync import Client, Lease
from createos_sync.emulator import Emulator
from createos_sync.emulator._machine.isolation import REPORTER, choose

from ..waiting import wait_until
from .helpers import FAST, own_emulator, proc_state
from .subprocesses import finish, read_until, spawn


def sleepers(seconds: str) -> list[int]:
    """Host processes running ``sleep SECONDS`` (a number no other test uses)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[:2] == [b"sleep", seconds.encode()] and proc_state(int(name)) not in (None, "Z"):
            found.append(int(name))
    return found


def marker() -> str:
    return str(10**6 + secrets.randbelow(10**6))


@pytest.fixture(scope="module")
def plain() -> Iterator[Emulator]:
    with own_emulator(isolation="none") as emu:
        assert emu.isolation == "none"
        yield emu


@pytest.fixture
def client(plain: Emulator) -> Iterator[Client]:
    """The tier's ``box`` (conftest) opens its lease on this client: on ``plain``."""
    with plain.client(requests_per_minute=FAST) as plain_client:
        yield plain_client


def test_terminate_and_close_catch_processes_that_left_the_session(plain: Emulator) -> None:
    term, run, started = marker(), marker(), marker()
    with plain.client(requests_per_minute=FAST) as client:
        with client.lease() as box:
            process = box.start(f"setsid sleep {term} & echo started; exec sleep 600")
            assert next(process.output()) == ("stdout", "started\n")
            wait_until(lambda: sleepers(term), "the escaped sleep")
            process.terminate()
            assert sleepers(term) == []  # terminated with the rest of its tree
            # a finished run's escaped child lives on until the sandbox goes...
            assert box.run(f"setsid sleep {run} >/dev/null 2>&1 & echo ok").stdout == "ok\n"
            wait_until(lambda: sleepers(run), "the escaped sleep of run()")
            box.start(f"setsid sleep {started} >/dev/null 2>&1 & exec sleep 600")
            wait_until(lambda: sleepers(started), "the escaped sleep of start()")
            assert {p.sandbox_id for p in plain.live_processes()} == {box.id}
        # ...and close() (terminate, then destroy) leaves nothing behind
        assert sleepers(run) == [] and sleepers(started) == []
        assert plain.live_processes() == []


# A script whose emulator (plain mode) is killed with SIGKILL while its sandbox runs an
# escaped process: no cleanup code can run in it.
DOOMED_EMULATOR = """
import sys, time
from createos_sync.emulator import Emulator
emu = Emulator(isolation="none", rate_limit=None).start()
client = emu.client()
box = client.lease(journal=False).open()
box.start(f"setsid sleep {sys.argv[1]} >/dev/null 2>&1 & exec sleep {sys.argv[1]}")
print(emu.sandbox_path(box.id, "/workspace").parents[1], flush=True)
time.sleep(1000)
"""


def test_nothing_outlives_an_emulator_killed_with_sigkill() -> None:
    seconds = marker()
    doomed = spawn([sys.executable, "-c", DOOMED_EMULATOR, seconds], dict(os.environ))
    root = Path(read_until(doomed, b"\n").decode().strip())
    wait_until(lambda: len(sleepers(seconds)) == 2, "both sleeps")
    assert root.is_dir() and root.name.startswith("createos-emulator-")
    doomed.send_signal(signal.SIGKILL)
    finish(doomed)
    wait_until(lambda: not sleepers(seconds), "the sandbox's processes to die with it")
    wait_until(lambda: not root.exists(), "the emulator's temporary root to be removed")


def test_commands_see_the_sandbox_paths_the_files_api_uses(
    plain: Emulator, box: Lease, tmp_path: Path
) -> None:
    host_workspace = Path("/workspace")
    existed = host_workspace.exists()
    box.write_file("/workspace/in.txt", b"from the files api\n")
    assert box.run("cat /workspace/in.txt").stdout == "from the files api\n"
    assert box.run(["cat", "/workspace/in.txt"]).stdout == "from the files api\n"
    box.run("mkdir -p /workspace/app && echo made > /workspace/app/out.txt", check=True)
    assert box.read_file("/workspace/app/out.txt") == b"made\n"
    assert box.run("pwd; cat out.txt", cwd="/workspace/app").stdout.endswith("/app\nmade\n")
    assert box.run("echo $OUT", env={"OUT": "/workspace/x"}).stdout.strip().endswith("/workspace/x")
    box.run("echo t > /tmp/t.txt && echo h > /home/user/h.txt", check=True)
    assert box.read_file("/tmp/t.txt") == b"t\n" and box.read_file("/home/user/h.txt") == b"h\n"
    assert box.run("cat in.txt", stdin="unused").stdout == "from the files api\n"
    assert host_workspace.exists() == existed  # the host's own /workspace is never touched
    # a path that merely contains a sandbox path is left alone
    assert box.run("echo /var/tmp /workspaces x/tmp").stdout == "/var/tmp /workspaces x/tmp\n"
    # directory trees travel through tar in the sandbox: the paths agree there too
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("a")
    box.upload_dir(tmp_path / "src", "/workspace/src")
    box.download_dir("/workspace/src", tmp_path / "back")
    assert (tmp_path / "back" / "a.txt").read_text() == "a"


def test_a_plain_command_reports_its_exact_status(box: Lease) -> None:
    assert box.run("exit 7").exit_code == 7
    killed = box.run("kill -KILL $$")
    assert (killed.exit_code, killed.signal) == (None, "SIGKILL")
    assert box.run("exit 137").exit_code == 137  # told apart from a SIGKILL


# Run by the terminal's session leader (bash): the terminal is its controlling tty, this
# child is in its foreground group, and the leader's parent is the subreaper.
ON_TERMINAL = (
    "import os; os.close(os.open('/dev/tty', os.O_RDWR)); "
    "print(os.getsid(0) == os.getppid(), os.tcgetpgrp(0) == os.getpgrp(), flush=True)"
)


def _argv(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def _parent(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return int(raw[raw.rindex(")") + 2 :].split()[1])


def test_a_terminal_command_leads_its_session_under_the_subreaper(
    plain: Emulator, box: Lease
) -> None:
    box.write_file("/workspace/in.txt", b"mapped\n")
    assert box.run("cat /workspace/in.txt", pty=True).stdout == "mapped\r\n"
    seconds = marker()
    script = f'setsid sleep {seconds} >/dev/null 2>&1 & python3 -c "$1"; exec sleep 600'
    process = box.start(["bash", "-c", script, "-", ON_TERMINAL], pty=True)
    assert next(process.output()) == ("stdout", "True True\r\n")
    wait_until(lambda: sleepers(seconds), "the escaped sleep")
    leader = wait_until(lambda: _sleeping_leader(plain, process.id), "exec sleep 600")
    helper = _argv(_parent(leader))  # what `ps` shows of it: a short prefix, then the command
    assert helper[1:5] == ["-I", "-S", REPORTER, "--subreaper"] and helper[6] == "--terminal"
    assert helper[7].isdigit() and "-c" not in helper[:8]  # then the command, no source code
    process.terminate()
    assert sleepers(seconds) == []  # it left the session, not the subreaper's tree


def _sleeping_leader(plain: Emulator, process_id: str) -> int | None:
    """The session leader of that process's tree, once it runs ``sleep 600``."""
    for live in plain.live_processes():
        if live.process_id == process_id:
            for pid in live.pids:
                with contextlib.suppress(OSError):
                    if os.getsid(pid) == pid and _argv(pid) == ["sleep", "600"]:
                        return pid
    return None


def test_only_clear_path_arguments_are_rewritten(box: Lease) -> None:
    box.write_file("/workspace/data.txt", b"sandbox's\n")
    # a program's own text keeps the sandbox path as written, in argv and in a script
    code = "print('/workspace/data.txt', '/tmp/x')"
    assert box.run(["python3", "-c", code]).stdout == "/workspace/data.txt /tmp/x\n"
    assert box.run(f'python3 -c "{code}"').stdout == "/workspace/data.txt /tmp/x\n"
    # a path argument, bare, quoted, after a redirection or "=", still means the sandbox's
    both = box.run('cat "/workspace/data.txt"; cat </workspace/data.txt')
    assert both.stdout == "sandbox's\n" * 2
    assert box.run("F=/workspace/data.txt; cat $F", stdin="x").stdout == "sandbox's\n"


def test_the_start_up_warning_says_in_plain_words_what_will_not_work(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, "createos_sync.emulator"):
        choose("none")
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "falling back" not in warning
    assert "can read and change your files" in warning
    assert "a path that a program opens by itself" in warning and "apt-get install" in warning
