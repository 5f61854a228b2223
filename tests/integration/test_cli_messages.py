"""What the command line says to a user who got something wrong, typed as a user types it."""

from __future__ import annotations

from createos_sync.emulator import Emulator

from .helpers import own_emulator
from .subprocesses import CLI, Terminal, emulator_env, finish, run_all, spawn

HINT = "see `createos-sync run --help`"


def test_usage_errors_are_one_line_and_a_pointer_to_help(
    emulator: Emulator, env: dict[str, str]
) -> None:
    emulator.clear_request_log()
    outcomes = run_all(
        [*CLI, "run", "--env", "1X=2", "--", "true"],
        [*CLI, "run", "--upload", "/no/such/file:/workspace/x", "--", "true"],
        [*CLI, "run", "--timeout", "-1", "--", "true"],
        [*CLI, "run", "--bogus", "--", "true"],
        [*CLI, "run"],
        [*CLI, "run", "--local", "--keep", "--", "true"],
        env=env,
    )
    firsts = []
    for status, out, err in outcomes:
        assert (status, out) == (2, ""), err
        first, hint = err.splitlines()
        assert first.startswith("createos-sync: error: ") and hint == HINT, err
        firsts.append(first)
    assert "'1X'" in firsts[0] and "/no/such/file" in firsts[1] and "positive" in firsts[2]
    assert "--bogus" in firsts[3] and "no command given" in firsts[4] and "--keep" in firsts[5]
    assert emulator.request_log == []  # all found before any request


def test_an_unknown_shape_or_rootfs_is_a_usage_error_naming_the_valid_ones(
    emulator: Emulator, env: dict[str, str]
) -> None:
    emulator.clear_request_log()
    status, out, err = finish(spawn([*CLI, "run", "--shape", "nope", "--", "true"], env))
    assert (status, out) == (2, "")
    assert err.startswith("createos-sync: error: unknown shape 'nope': the shapes are ")
    assert "s-1vcpu-1gb, " in err and err.splitlines()[1:] == [HINT]
    # the refused creation, then one catalog request, made only because creation failed
    assert [(r.method, r.path, r.status) for r in emulator.request_log] == [
        ("POST", "/v1/sandboxes", 400),
        ("GET", "/v1/shapes", 200),
    ]
    procs = [
        spawn([*CLI, "run", "--rootfs", "windows-95", "--", "true"], env),
        spawn([*CLI, "run", "--", "true"], {**env, "CREATEOS_SHAPE": "s-huge"}),
    ]
    rootfs, from_env = [finish(p) for p in procs]
    assert rootfs[0] == 2 and rootfs[2].splitlines()[1:] == [HINT]
    assert "unknown rootfs 'windows-95': the root file systems are ubuntu-24.04, " in rootfs[2]
    assert from_env[0] == 2
    assert "unknown shape 's-huge' (from CREATEOS_SHAPE)" in from_env[2]


def test_missing_and_rejected_keys_are_said_in_the_cli_s_own_words(env: dict[str, str]) -> None:
    keyless = {k: v for k, v in env.items() if k != "CREATEOS_API_KEY"}
    run, ls, templates = run_all(
        [*CLI, "run", "--", "true"], [*CLI, "ls"], [*CLI, "template", "ls"], env=keyless
    )
    assert run == (
        2, "", "createos-sync: error: set CREATEOS_API_KEY, or use --local to try the local "
        "emulator\n",
    )  # fmt: skip
    for account_command in (ls, templates):
        assert account_command[0] == 2
        assert account_command[2].startswith(
            "createos-sync: error: set CREATEOS_API_KEY, or add --local to use the emulator that "
            "`createos-sync emulator` serves"
        )
    assert "pass api_key=" not in run[2] + ls[2] + templates[2]  # a Python argument means nothing
    wrong_key = "k-wrong-0123456789"
    status, _, err = finish(spawn([*CLI, "ls"], {**env, "CREATEOS_API_KEY": wrong_key}))
    assert status == 1 and err.count("\n") == 1
    assert err.startswith("createos-sync: error: HTTP 401 during ")
    assert err.endswith(": the API key was rejected (check CREATEOS_API_KEY)\n")  # once
    assert wrong_key not in err


def test_destroy_of_an_unknown_sandbox_says_so_and_ls_says_when_empty() -> None:
    with own_emulator() as emu:
        env = emulator_env(emu)
        destroy, ls, templates = run_all(
            [*CLI, "destroy", "sb-typo"], [*CLI, "ls"], [*CLI, "template", "ls"], env=env
        )
    # Never seen is not success (issue 37): a typo must not look like a destroy.
    assert destroy == (
        2,
        "",
        "createos-sync: no such sandbox sb-typo: never seen here (`createos-sync ls` lists them)\n",
    )
    assert ls == (0, "no sandboxes\n", "")
    assert templates == (0, "no templates\n", "")


def test_help_names_the_command_as_typed_and_every_exit_status(env: dict[str, str]) -> None:
    emulator_help, run_help = run_all(
        [*CLI, "emulator", "--help"], [*CLI, "run", "--help"], env=env
    )
    assert emulator_help[1].startswith("usage: createos-sync emulator ")
    assert "python -m" not in emulator_help[1]
    text = run_help[1]
    statuses = text.split("exit status:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in statuses] == [
        "N", "124", "128+N", "130", "143,", "2", "1",
    ]  # fmt: skip
    assert "143, 129" in text
    assert "progress bars when stderr is a terminal" in " ".join(text.split())


def test_the_interrupted_message_starts_on_a_line_of_its_own(env: dict[str, str]) -> None:
    terminal = Terminal([*CLI, "run", "--", "echo started; exec sleep 600"], env)
    terminal.read_until(b"started")
    terminal.type(b"\x03")  # Ctrl-C: the terminal echoes ^C, with no line break after it
    status, screen = terminal.finish()
    assert status == 130
    (line,) = [row for row in screen.splitlines() if "interrupted" in row]
    assert line == "createos-sync: interrupted: SIGINT", screen
