"""The ``createos-sync`` command line, in subprocesses against the session emulator."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from createos_sync.cli import main
from createos_sync.emulator import Emulator
from createos_sync.journal import Entry, Journal

from ..waiting import wait_until
from .subprocesses import (
    CLI,
    Terminal,
    emulator_env,
    finish,
    read_until,
    run_all,
    spawn,
)

# Waits, without any timing, until the test creates the file `go` in /workspace.
UNTIL_GO = "while [ ! -e go ]; do sleep 0.02; done"
WITHOUT_WERKZEUG = (
    "import sys; sys.modules['werkzeug'] = None; from createos_sync.cli import main; "
    "sys.exit(main(['run', '--local', '--', 'true']))"
)


def test_run_exit_status_output_transfers_and_command_forms(
    env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "in.txt").write_text("hello\n")
    ok, failed, timed_out, script, argv, transfers, bad_download, killed = run_all(
        [*CLI, "run", "--", "echo out; echo err >&2"],
        [*CLI, "run", "--", "exit 3"],
        [*CLI, "run", "--timeout", "3", "--", "echo before; exec sleep 60"],
        [*CLI, "run", "--", "echo a && echo b"],
        [*CLI, "run", "--env", "GREETING=hi there", "--cwd", "/tmp", "--", "sh", "-c",
         'echo "$GREETING" && pwd', "ignored-arg0"],
        [*CLI, "run",
         "--upload", f"{tmp_path / 'in.txt'}:/workspace/in.txt",
         "--download", f"/workspace/out.txt:{tmp_path / 'out.txt'}",
         "--", "tr a-z A-Z < in.txt > out.txt; exit 5"],
        [*CLI, "run", "--download", f"/workspace/missing:{tmp_path / 'missing'}", "--", "true"],
        [*CLI, "run", "--", "kill -KILL $$"],
        env=env,
    )  # fmt: skip
    assert ok == (0, "out\n", "err\n")
    assert failed[:2] == (3, "")
    assert killed[0] == 128 + 9  # a command killed by signal N: 128 + N (exit-codes.md)
    assert timed_out[:2] == (124, "before\n")
    assert "timed out after 3 s" in timed_out[2]
    assert script[:2] == (0, "a\nb\n")
    # (without isolation, pwd shows where the emulator keeps the sandbox's /tmp)
    assert argv[0] == 0 and argv[1].startswith("hi there\n") and argv[1].endswith("/tmp\n")
    # uploads come before the command, downloads after it even when it failed
    assert transfers == (5, "", "")
    assert (tmp_path / "out.txt").read_text() == "HELLO\n"
    # a failed download is reported, turns success into failure, leaves nothing behind
    assert bad_download[0] == 1
    assert "downloading /workspace/missing" in bad_download[2]
    assert "Traceback" not in bad_download[2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.txt"]
    assert not Journal().entries()  # every lease forgot its sandbox once destroyed


def test_signals_terminate_the_remote_process_and_destroy_the_sandbox(
    emulator: Emulator, env: dict[str, str]
) -> None:
    before = set(emulator.live_sandboxes())
    sent = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    procs = [spawn([*CLI, "run", "--", "echo started; exec sleep 600"], env) for _ in sent]
    # As under nohup: an ignored SIGHUP stays ignored, and the command runs to its end.
    nohup = spawn(["nohup", *CLI, "run", "--", f"echo started; {UNTIL_GO}; echo finished"], env)
    for proc in [*procs, nohup]:
        read_until(proc, b"started\n")
    running = set(emulator.live_sandboxes()) - before
    assert len(running) == len(sent) + 1
    assert {p.sandbox_id for p in emulator.live_processes()} == running
    for proc, signum in zip(procs, sent, strict=True):
        proc.send_signal(signum)
    nohup.send_signal(signal.SIGHUP)
    for proc, signum in zip(procs, sent, strict=True):
        status, _, err = finish(proc)
        assert status == 128 + signum
        assert f"interrupted: {signal.Signals(signum).name}" in err
        assert "Traceback" not in err
    (nohup_sandbox,) = running & set(emulator.live_sandboxes())
    emulator.sandbox_path(nohup_sandbox, "/workspace/go").touch()
    assert finish(nohup)[:2] == (0, "finished\n")
    assert not set(emulator.live_sandboxes()) & running
    assert emulator.live_processes() == []
    assert not Journal().entries()


@pytest.fixture
def in_process(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """For ``main()`` called in this process: the same environment as the subprocesses get."""
    for name in ("CREATEOS_API_URL", "CREATEOS_API_KEY"):
        monkeypatch.setenv(name, env[name])


def test_keep_leaves_the_sandbox_and_ls_destroy_manage_it(
    emulator: Emulator, env: dict[str, str], in_process: None, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = finish(spawn([*CLI, "run", "--keep", "--", "echo kept"], env))
    kept = err.split("keeping sandbox ", 1)[1].split()[0]
    assert (status, out) == (0, f"{kept}\nkept\n")  # the id first, for ID=$(...)
    assert kept in emulator.live_sandboxes()
    assert not Journal().entries()  # kept on purpose: reap must not touch it

    assert main(["ls", "--json"]) == 0
    sandboxes = {s["id"]: s for s in json.loads(capsys.readouterr().out)}
    assert sandboxes[kept]["status"] == "running"
    assert isinstance(sandboxes[kept]["created_at"], str)
    assert main(["ls"]) == 0
    table = capsys.readouterr().out
    assert table.startswith("ID") and kept in table
    assert main(["shapes", "--json"]) == 0
    assert "s-1vcpu-1gb" in {s["id"] for s in json.loads(capsys.readouterr().out)}

    # A journaled sandbox whose owner died shows as orphaned; destroy forgets it.
    dead_owner = Entry(name="n", base_url=emulator.url, sandbox_id=kept, pid=2**22 + 1)
    Journal().add(dead_owner)
    assert main(["ls"]) == 0
    (line,) = [row for row in capsys.readouterr().out.splitlines() if row.startswith(kept)]
    assert line.endswith("orphaned: see `createos-sync reap`")

    # A typo is not a success (2, as for any name the account does not have); an id known
    # and gone is (0).
    assert main(["destroy", kept, "sbx-never-existed"]) == 2
    out, err = capsys.readouterr()
    assert out == f"destroyed {kept}\n"
    assert "no such sandbox sbx-never-existed: never seen here" in err
    assert kept not in emulator.live_sandboxes()
    assert Journal().entries() == []
    # The service answers a second DELETE 200 "destroyed", as the first (no extra request
    # to tell them apart): a success either way, never "no such sandbox".
    assert main(["destroy", kept]) == 0
    assert capsys.readouterr().out == f"destroyed {kept}\n"


def test_expected_failures_are_one_line_without_traceback(
    monkeypatch: pytest.MonkeyPatch, in_process: None, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong_key = "k-wrong-0123456789"
    monkeypatch.setenv("CREATEOS_API_KEY", wrong_key)
    assert main(["ls"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("createos-sync: error: HTTP 401 during ")
    assert err.count("\n") == 1 and err.count("the API key was rejected") == 1
    assert main(["--debug", "ls"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and wrong_key not in err

    monkeypatch.setenv("CREATEOS_API_URL", "http://example.com")
    assert main(["ls"]) == 2
    assert capsys.readouterr().err == (
        "createos-sync: configuration error: plain HTTP is only allowed to a loopback host; "
        "use https\n"
    )
    monkeypatch.delenv("CREATEOS_API_KEY")
    assert main(["run", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert "CREATEOS_API_KEY" in err and "Traceback" not in err


def test_local_runs_on_an_in_process_emulator(emulator: Emulator) -> None:
    env = emulator_env(emulator, CREATEOS_API_URL="", CREATEOS_API_KEY="")
    before = set(emulator.live_sandboxes())
    local, missing = run_all(
        [*CLI, "run", "--local", "--", "python3", "-c", "print(6 * 7)"],
        [sys.executable, "-c", WITHOUT_WERKZEUG],
        env=env,
    )
    assert local[:2] == (0, "42\n")
    assert missing[0] == 2
    assert "pip install 'createos-sync[emulator]'" in missing[2]
    assert "Traceback" not in missing[2]
    assert set(emulator.live_sandboxes()) == before  # the session emulator was not used


def test_console_script_matches_python_m() -> None:
    script = Path(sys.executable).with_name("createos-sync")
    if not script.exists():
        pytest.skip("the console script is not installed next to this interpreter")
    version = subprocess.run([str(script), "--version"], capture_output=True, text=True)
    assert (version.returncode, version.stdout) == (0, "createos-sync 0.1.0\n")


@pytest.mark.parametrize(
    "argv",
    [
        ["run"],  # no command
        ["run", "--bogus", "--", "true"],
        ["run", "--env", "1X=2", "--", "true"],
        ["run", "--timeout", "-1", "--", "true"],
        ["run", "--upload", "relative:path", "--", "true"],
        ["run", "--upload", "/no/such/file:/workspace/x", "--", "true"],
        ["run", "--download", "relative/path:here", "--", "true"],
        ["run", "--local", "--keep", "--", "true"],
        ["destroy"],
        ["nonsense"],
        [],
    ],
)
def test_usage_errors_exit_2_before_any_request(
    argv: list[str], emulator: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    emulator.clear_request_log()
    assert main(argv) == 2
    assert "error" in capsys.readouterr().err
    assert emulator.request_log == []


def test_emulator_subcommand_delegates(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emulator", "--help"]) == 0
    assert "--journal-bytes" in capsys.readouterr().out


def test_reap_subcommand_with_an_empty_journal(
    in_process: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["reap", "--dry-run"]) == 0
    assert capsys.readouterr().out == "the lease journal is empty: nothing to reap\n"


def test_directories_download_with_or_without_a_slash_and_failures_name_the_path(
    emulator: Emulator, env: dict[str, str], tmp_path: Path
) -> None:
    make_tree = "mkdir -p app/sub; echo a > app/a.txt; echo b > app/sub/b.txt; echo f > f.txt"
    emulator.clear_request_log()
    status, out, err = finish(spawn([*CLI, "run",
        "--download", f"/workspace/app:{tmp_path / 'plain'}",
        "--download", f"/workspace/app/:{tmp_path / 'slashed'}",
        "--download", f"/workspace/f.txt:{tmp_path / 'f.txt'}",
        "--", make_tree], env))  # fmt: skip
    assert (status, out) == (0, ""), err
    for tree in ("plain", "slashed"):
        assert (tmp_path / tree / "a.txt").read_text() == "a\n"
        assert (tmp_path / tree / "sub" / "b.txt").read_text() == "b\n"
    assert (tmp_path / "f.txt").read_text() == "f\n"
    # one exec asked about both paths without a slash, at once
    assert [r.path for r in emulator.request_log].count(f"{_sandbox(emulator)}/exec") == 3  # + 2 rm
    (tmp_path / "in.txt").write_text("x")
    upload, download = run_all(
        [*CLI, "run", "--upload", f"{tmp_path / 'in.txt'}:/proc/in.txt", "--", "true"],
        [*CLI, "run", "--download", f"/workspace/nothing/here:{tmp_path / 'x'}", "--", "true"],
        env=env,
    )
    assert upload[0] == 1 and upload[2].count("\n") == 1
    assert upload[2].startswith(
        f"createos-sync: error: uploading {tmp_path / 'in.txt'} to /proc/in.txt failed: HTTP 403"
    )
    assert download[0] == 1
    assert download[2].startswith("createos-sync: downloading /workspace/nothing/here to ")
    assert "HTTP 404 during file transfer" in download[2]


def _sandbox(emulator: Emulator) -> str:
    """The path prefix of the one sandbox the request log names."""
    (sandbox,) = {
        "/".join(r.path.split("/")[:4]) for r in emulator.request_log if r.path.count("/") >= 3
    }
    return sandbox


def test_transfers_show_progress_bars_on_a_terminal_only(
    env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "data.bin").write_bytes(b"\0" * 300_000)
    argv = [*CLI, "run", "--upload", f"{tmp_path / 'data.bin'}:/workspace/data.bin",
            "--download", f"/workspace/data.bin:{tmp_path / 'back.bin'}", "--", "true"]  # fmt: skip
    terminal = Terminal(argv, env)
    piped = spawn([*argv[:-3], f"/workspace/data.bin:{tmp_path / 'piped.bin'}", "--", "true"], env)
    status, screen = terminal.finish()
    assert status == 0, screen
    bars = [line for line in screen.replace("\r", "\n").splitlines() if "100%|" in line]
    assert any(b.startswith("upload data.bin: 100%|") for b in bars), screen
    assert any(b.startswith("download /workspace/data.bin: 100%|") for b in bars), screen
    assert (tmp_path / "back.bin").read_bytes() == b"\0" * 300_000
    assert finish(piped) == (0, "", "")  # a pipe gets no bar: logs stay clean


def test_a_local_run_killed_with_sigkill_leaves_no_entry_no_files_no_process(
    emulator: Emulator, tmp_path: Path
) -> None:
    """An in-process emulator's sandboxes die with it: nothing for reap, nothing on disk."""
    temp = tmp_path / "temp"
    temp.mkdir()
    local = emulator_env(emulator, CREATEOS_API_URL="", CREATEOS_API_KEY="", TMPDIR=str(temp))
    seconds = str(2_000_000 + os.getpid() % 1000)
    doomed = spawn([*CLI, "run", "--local", "--", f"echo started; exec sleep {seconds}"], local)
    read_until(doomed, b"started\n")
    assert [p.name[:18] for p in temp.iterdir()] == ["createos-emulator-"]
    assert Journal().entries() == []
    doomed.send_signal(signal.SIGKILL)
    finish(doomed)
    wait_until(lambda: not list(temp.iterdir()), "the emulator's files to be removed")
    wait_until(lambda: not _running(["sleep", seconds]), "the command to die with its emulator")


def _running(argv: list[str]) -> bool:
    """Whether a host process runs exactly ``argv`` (a zombie's command line is empty)."""
    wanted = "".join(f"{arg}\0" for arg in argv).encode()
    for name in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if name.isdigit() and Path(f"/proc/{name}/cmdline").read_bytes() == wanted:
                return True
    return False
