"""What a new user's first hour with the command line tripped on (issue 24), typed as they
type it, in subprocesses against the session emulator."""

from __future__ import annotations

import subprocess

import pytest

from createos_sync import Client
from createos_sync.emulator import Emulator

from .subprocesses import CLI, DEADLINE, emulator_env


@pytest.fixture
def env(emulator: Emulator) -> dict[str, str]:
    return emulator_env(emulator)


def typed(argv: list[str], env: dict[str, str], stdin: bytes | None = None) -> tuple[int, str, str]:
    """Run the CLI with ``stdin`` piped in (None: /dev/null); status, stdout, stderr."""
    done = subprocess.run(
        argv,
        env=env,
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        timeout=DEADLINE,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def test_run_forwards_piped_stdin(emulator: Emulator, env: dict[str, str]) -> None:
    lines = b"".join(b"line %d\n" % i for i in range(50_000))  # more than a pipe holds
    status, out, err = typed([*CLI, "run", "--", "wc -l; echo done"], env, stdin=lines)
    assert (status, out) == (0, "50000\ndone\n"), err
    status, out, err = typed([*CLI, "run", "--local", "--", "cat"], env, stdin=b"hi\n")
    assert (status, out) == (0, "hi\n"), err
    emulator.clear_request_log()
    status, out, err = typed([*CLI, "run", "--", "cat"], env)  # /dev/null: nothing to stage
    assert (status, out) == (0, ""), err
    assert not [r for r in emulator.request_log if r.method == "PUT"]
    status, out, err = typed([*CLI, "run", "--tty", "--", "cat"], env, stdin=b"hi\n")
    assert (status, out) == (2, "") and "--tty" in err.splitlines()[0], err


def test_template_rm_of_an_unknown_id_says_so(
    emulator: Emulator, env: dict[str, str], client: Client
) -> None:
    status, out, err = typed([*CLI, "template", "rm", "tpl-nope"], env)
    assert (status, out) == (0, "no such template tpl-nope (already gone)\n"), err
    assert client.delete_template("tpl-nope") is False  # in Python: gone is fine, and said
