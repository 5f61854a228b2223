"""Command wrapping, checked by running the generated wrapper through a real local bash."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from createos_sync._commands.command import Command, CommandTooLong, Gate

PRINT_ARGV = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]
HOSTILE = [
    "",
    " ",
    "'",
    '"',
    "$(touch /tmp/pwned)",
    "`id`",
    "a b\tc\nd",
    "$HOME ${PATH} $0 $@",
    "\\",
    "--",
    "-c",
    "; rm -rf /",
    "☃ ünïcödé 日本",
    "!event",
    "*",
    "~",
    "\x01\x1b[31m",
]


def run_wrapper(
    command: Command, stdin_path: str | None = None, cwd: str | None = None
) -> subprocess.CompletedProcess[str]:
    args = command.wrapper(Gate.STDIN_EOF, stdin_path)
    assert args[0] == "-c"
    return subprocess.run(
        ["/bin/bash", *args],
        input="",
        capture_output=True,
        text=True,
        timeout=30,
        cwd=cwd,
        env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")},
    )


def test_hostile_argv_reaches_the_program_byte_exact() -> None:
    done = run_wrapper(Command.parse([*PRINT_ARGV, *HOSTILE]))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == HOSTILE


def test_hostile_env_values_reach_the_program_exactly() -> None:
    env = {f"V{i}": value for i, value in enumerate(HOSTILE)}
    code = (
        "import json, os; "
        "print(json.dumps({k: v for k, v in os.environ.items() if k.startswith('V')}))"
    )
    done = run_wrapper(Command.parse([sys.executable, "-c", code], env=env))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == env


def test_user_path_wins_over_the_login_profile() -> None:
    done = run_wrapper(
        Command.parse('printf "%s" "$PATH"', env={"PATH": "/custom/bin:/usr/bin:/bin"})
    )
    assert done.stdout.endswith("/custom/bin:/usr/bin:/bin")


def test_string_is_a_bash_script_with_its_own_line_numbers() -> None:
    done = run_wrapper(Command.parse("echo one\nfalse\necho $LINENO", env={"A": "1"}))
    assert done.stdout.splitlines()[-2:] == ["one", "3"]


def test_cwd_with_awkward_name(tmp_path: os.PathLike[str]) -> None:
    target = os.path.join(tmp_path, 'it\'s a "dir" $x')
    os.mkdir(target)
    done = run_wrapper(Command.parse("pwd", cwd=target))
    assert done.stdout.strip() == target


def test_missing_cwd_fails_the_command_not_the_wrapper() -> None:
    done = run_wrapper(Command.parse("echo never", cwd="/no/such/dir"))
    assert done.returncode == 1 and "never" not in done.stdout


def test_staged_stdin_is_redirected_and_removed(tmp_path: os.PathLike[str]) -> None:
    staged = os.path.join(tmp_path, "stdin")
    with open(staged, "w") as f:
        f.write("line one\nline two\n")
    done = run_wrapper(Command.parse("cat; echo done"), stdin_path=staged)
    assert done.stdout.splitlines()[-3:] == ["line one", "line two", "done"]
    assert not os.path.exists(staged)


def test_no_stdin_means_empty_stdin() -> None:
    done = run_wrapper(Command.parse("cat; echo end"))
    assert done.stdout.splitlines()[-1] == "end"


def test_line_gate_keeps_stdin_open_for_the_command() -> None:
    args = Command.parse("read x; echo got:$x").wrapper(Gate.STDIN_LINE)
    done = subprocess.run(
        ["/bin/bash", *args], input="\nhello\n", capture_output=True, text=True, timeout=30
    )
    assert done.stdout.splitlines()[-1] == "got:hello"


def test_oversized_command_is_refused_before_sending() -> None:
    with pytest.raises(ValueError, match="too long"):
        Command.parse("echo " + "x" * 200_000).wrapper(Gate.STDIN_EOF)


def test_a_command_too_long_for_an_argument_runs_from_a_staged_script(
    tmp_path: os.PathLike[str],
) -> None:
    command = Command.parse("echo " + "x" * 200_000 + " | wc -c\necho $LINENO", env={"A": "1"})
    with pytest.raises(CommandTooLong, match="too long to pass as an argument"):
        command.wrapper(Gate.STDIN_EOF)
    script = os.path.join(tmp_path, "script")
    with open(script, "w") as f:
        f.write(command.staged_script())
    args = command.wrapper(Gate.STDIN_EOF, script_path=script)
    assert len(args[1]) < 1024
    done = subprocess.run(
        ["/bin/bash", *args], input="", capture_output=True, text=True, timeout=30
    )
    assert done.stdout.splitlines()[-2:] == ["200001", "2"]  # the user's line numbers kept
    assert not os.path.exists(script)  # it removed itself


def test_repr_never_shows_env_values() -> None:
    assert "hunter2" not in repr(Command.parse("x", env={"TOKEN": "hunter2"}))


printable = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=40
)


@settings(max_examples=25, deadline=None)
@given(st.lists(printable, min_size=0, max_size=5))
def test_arbitrary_argv_round_trips(argv: list[str]) -> None:
    done = run_wrapper(Command.parse([*PRINT_ARGV, *argv]))
    assert json.loads(done.stdout.splitlines()[-1]) == argv


def test_staged_stdin_is_found_under_tmpdir_when_tmp_is_elsewhere(
    tmp_path: os.PathLike[str],
) -> None:
    staged_name = ".createos-sync-stdin-test1234"
    with open(os.path.join(tmp_path, staged_name), "w") as f:
        f.write("from tmpdir\n")
    args = Command.parse("cat").wrapper(Gate.STDIN_EOF, f"/tmp/{staged_name}")
    done = subprocess.run(
        ["/bin/bash", *args],
        input="",
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)},
    )
    assert done.stdout.splitlines()[-1] == "from tmpdir"
    assert not os.path.exists(os.path.join(tmp_path, staged_name))


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(printable.filter(lambda s: s.strip()), st.lists(printable, min_size=1, max_size=4)),
    st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,5}", fullmatch=True), printable, max_size=3),
)
def test_unwrap_recovers_the_users_command_without_env(
    cmd: str | list[str], env: dict[str, str]
) -> None:
    from createos_sync._commands.command import unwrap

    command = Command.parse(cmd, env=env, cwd="/w")
    for gate in Gate:
        recovered = unwrap(command.wrapper(gate, "/tmp/x" if gate is Gate.STDIN_EOF else None))
        assert recovered == (cmd if isinstance(cmd, str) else tuple(cmd))


def test_unwrap_leaves_foreign_args_alone() -> None:
    from createos_sync._commands.command import unwrap

    assert unwrap(["-c", "echo hi"]) is None
    assert unwrap(["python3", "server.py"]) is None
    assert unwrap(["-c", "# createos-sync argv 0\nexec /bin/bash -lc 'unterminated"]) is None
