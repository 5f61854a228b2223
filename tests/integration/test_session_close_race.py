"""The command session's supervisor when closing ends it: under a command, or idle.

Closing signals every process of the session's tree, one after another: the
supervisor's EXIT trap may remove the session's directory while the
command's watcher still lives. That watcher must then write no end record:
one would tell the client the command finished (``x 1``: its ``wait`` never
ran; ``x 143``: its job notice was lost), and ``run()`` would return it as
the command's result instead of raising ``LeaseClosed``. The first two run
the supervisor directly (no emulator), to force each ordering; the last
holds close()'s termination back (a fault) while the command dies of a signal.
Idle, the supervisor holds the next command's processes, made ahead: closing its stdin
(a kept lease's close) ends them too, and so does the death of its watcher.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import createos_sync as cs
from createos_sync._commands import framing
from createos_sync._commands.session import SCRIPT
from createos_sync.emulator import Fault

from .helpers import FAST, own_emulator, processes_of

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")


def children() -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            found.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    return found


def descendants(root: int) -> list[int]:
    tree, found, todo = children(), [], [root]
    while todo:
        for pid in tree.get(todo.pop(), []):
            found.append(pid)
            todo.append(pid)
    return found


def signal_quietly(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def wait_for(check: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    env = {"TMPDIR": str(tmp_path), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    supervisor = subprocess.Popen(
        ["/bin/bash", "-c", SCRIPT, "createos-sync-session", "S", "/workspace"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    tree: list[int] = []
    try:
        wait_for(lambda: any(tmp_path.glob(".createos_sync_session.*/tick")), "no session")
        directory = next(tmp_path.glob(".createos_sync_session.*"))
        tree = descendants(supervisor.pid)
        yield supervisor, directory
    finally:
        signal_quietly([*tree, *descendants(supervisor.pid)], signal.SIGKILL)
        signal_quietly([supervisor.pid], signal.SIGKILL)
        supervisor.communicate(timeout=10)


def end_records(out: bytes, token: str) -> list[str]:
    prefix = b"\x00\x1e" + token.encode() + b" "
    return [line[len(prefix) :].decode() for line in out.split(b"\n") if line.startswith(prefix)]


def started(supervisor: subprocess.Popen[bytes], directory: Path) -> tuple[str, int]:
    """Send the first command (``sleep 6``): its token and its pid, once it sleeps."""
    assert supervisor.stdin is not None
    token = framing.new_token()
    supervisor.stdin.write(framing.run_request(token, 1, None, None, "sleep 6"))
    supervisor.stdin.flush()
    command = command_of(directory)
    wait_for(lambda: sleeping(command), "the command never started")
    return token, command


def command_of(directory: Path) -> int:
    """The first command's pid, once its watcher wrote it (``p1``)."""
    pid: list[int] = []

    def written() -> bool:
        with contextlib.suppress(OSError, ValueError):
            pid.append(int((directory / "p1").read_text().split()[0]))
        return bool(pid)

    wait_for(written, "the command never started")
    return pid[0]


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def started_at(pid: int) -> str | None:
    """The start time of process ``pid`` (None once gone): a recycled pid is another."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


def sleeping(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "sleep"
    except OSError:
        return False


def test_a_watcher_that_outlives_its_session_directory_says_no_status(
    session: tuple[subprocess.Popen[bytes], Path],
) -> None:
    supervisor, directory = session
    token, command = started(supervisor, directory)
    waiter = parent_of(command)
    os.kill(waiter, signal.SIGSTOP)  # its SIGTERM comes last: it runs on once the trap ran
    # What the supervisor's EXIT trap does when its SIGTERM comes first (the trap itself is
    # not run here: the supervisor's death would orphan the stopped watcher's group, and the
    # kernel would hang it up); then the command dies of a signal, its job notice unwritable
    shutil.rmtree(directory)
    os.kill(command, signal.SIGKILL)
    os.kill(waiter, signal.SIGCONT)
    time.sleep(1.5)  # were the watcher to write its records, they come in this time
    signal_quietly(descendants(supervisor.pid), signal.SIGKILL)
    out, _ = supervisor.communicate(timeout=10)
    # never "x 137" (no job notice to tell a signal from an exit): no status, or "L"
    assert end_records(out, token) in (["a"], ["a", "L"]), out


def test_a_command_cut_after_its_session_ended_gets_no_exit_status(
    session: tuple[subprocess.Popen[bytes], Path],
) -> None:
    supervisor, directory = session
    token, command = started(supervisor, directory)
    supervisor.send_signal(signal.SIGTERM)
    wait_for(lambda: not directory.exists(), "the trap never ran")
    os.kill(command, signal.SIGTERM)  # the watcher's wait ends, its job notice has no file
    time.sleep(0.5)
    signal_quietly(descendants(supervisor.pid), signal.SIGKILL)
    out, _ = supervisor.communicate(timeout=10)
    assert end_records(out, token) == ["a"], out  # never "x 143": it died of SIGTERM


def test_a_command_ended_by_a_signal_while_close_cuts_its_session_is_cut_short() -> None:
    with (
        own_emulator(transition_delay=0) as emu,
        emu.client(requests_per_minute=FAST) as client,
    ):
        box = client.lease(on_exit="keep").open()
        sandbox_id = box.id
        assert sandbox_id is not None
        box.run("true")  # the session is up: the next command is one request
        outcomes: list[object] = []

        def runner() -> None:
            try:
                outcomes.append(box.run("sleep 1; kill -TERM $$", timeout=30))
            except BaseException as exc:
                outcomes.append(exc)

        thread = threading.Thread(target=runner)
        thread.start()
        time.sleep(0.3)
        # closing's first termination stalls (and does nothing): the command dies of a
        # signal meanwhile, its watcher alive to say "s 15" after close() began cutting it
        emu.faults.add(Fault("process.delete", status=503, delay=2.0))
        box.close()
        thread.join(30)
        try:
            assert len(outcomes) == 1
            assert isinstance(outcomes[0], cs.LeaseClosed), outcomes[0]
            assert processes_of(emu, sandbox_id) == []
        finally:
            client.destroy(sandbox_id)


def made_ahead(supervisor: subprocess.Popen[bytes], directory: Path) -> dict[int, str | None]:
    """Run a first command; then the next one's slot: its watcher (the supervisor's child),
    two relays and the command's process waiting for its request (pid: start time)."""
    assert supervisor.stdin is not None
    supervisor.stdin.write(framing.run_request(framing.new_token(), 1, None, None, "true"))
    supervisor.stdin.flush()
    wait_for(lambda: (directory / "z1").exists(), "the command never ended")
    wait_for(lambda: len(descendants(supervisor.pid)) >= 4, "nothing made ahead")
    return {pid: started_at(pid) for pid in descendants(supervisor.pid)}


def test_closing_its_stdin_ends_what_the_supervisor_made_ahead(
    session: tuple[subprocess.Popen[bytes], Path],
) -> None:
    supervisor, directory = session
    stdin = supervisor.stdin
    assert stdin is not None
    made = made_ahead(supervisor, directory)

    supervisor.stdin = None  # communicate() at the end must not flush it
    stdin.close()
    supervisor.wait(10)

    wait_for(lambda: all(started_at(pid) != at for pid, at in made.items()), "left running")


def test_what_a_killed_watcher_made_ahead_ends_with_it(
    session: tuple[subprocess.Popen[bytes], Path],
) -> None:
    supervisor, directory = session
    made_ahead(supervisor, directory)
    watcher = max(children().get(supervisor.pid, []), key=lambda pid: len(descendants(pid)))
    made = {pid: started_at(pid) for pid in descendants(watcher)}
    assert len(made) >= 3

    os.kill(watcher, signal.SIGKILL)

    wait_for(lambda: all(started_at(pid) != at for pid, at in made.items()), "left running")
