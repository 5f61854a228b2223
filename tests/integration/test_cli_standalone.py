"""Standalone emulators (``createos-sync emulator``) as a new user runs them (issue 37):
several at once, each with its own record; every command with ``--local``; both families of
environment names exported."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

from createos_sync import Client
from createos_sync.cli import _parser

from .subprocesses import CLI, DEADLINE, read_until
from .test_cli_first_hour import typed, without_key

SERVE = [*CLI, "emulator", "--no-rate-limit", "--isolation", "none", "--network", "shared"]


@contextlib.contextmanager
def serving(env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """A standalone emulator, until the block ends (SIGTERM, as Ctrl-C would)."""
    proc = subprocess.Popen(
        SERVE, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        read_until(proc, b"recorded in ")
        yield proc
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=DEADLINE)


def record_of(proc: subprocess.Popen[bytes], env: dict[str, str]) -> dict[str, str]:
    path = Path(env["CREATEOS_SYNC_STATE_DIR"]) / "emulators" / f"{proc.pid}.json"
    return dict(json.loads(path.read_text()))


def test_two_emulators_serve_at_once_and_neither_loses_its_record() -> None:
    env = without_key()
    with serving(env) as first:
        status, kept, err = typed([*CLI, "run", "--local", "--keep", "--", "true"], env)
        kept = kept.strip()
        assert status == 0 and kept.startswith("sb-"), err
        second = subprocess.Popen(
            SERVE, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            said = read_until(second, b"until it stops, then that one again")
            assert f"another emulator serves at {record_of(first, env)['url']}".encode() in said
            status, out, err = typed([*CLI, "ls", "--local"], env)
            assert status == 0 and kept not in out  # the newest serves, and says it is used:
            assert f"2 emulators serve: using the newest, {record_of(second, env)['url']}" in err
            status, exports, err = typed([*CLI, "emulator", "--env"], env)
            assert record_of(second, env)["url"] in exports and "2 emulators serve" in err
        finally:
            stop(second)
        # The first one's record was never touched: it serves again, with its sandbox.
        status, out, err = typed([*CLI, "ls", "--local"], env)
        assert status == 0 and kept in out and "emulators serve" not in err, err
        status, exports, _ = typed([*CLI, "emulator", "--env"], env)
        assert record_of(first, env)["url"] in exports
        assert typed([*CLI, "destroy", "--local", kept], env)[0] == 0
    assert typed([*CLI, "emulator", "--env"], env)[0] == 1  # none serves now


def test_every_command_takes_local() -> None:
    parser = _parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    missing = []
    for name, sub in commands.items():
        if name == "emulator":
            continue  # the emulator itself
        actions = sub._subparsers._group_actions[0].choices if sub._subparsers else {name: sub}
        for action, leaf in actions.items():
            if "--local" not in leaf._option_string_actions:
                missing.append(f"{name} {action}")
    assert missing == []


def test_token_and_run_with_disk_and_network_work_locally() -> None:
    env = without_key()
    with serving(env) as proc:
        record = record_of(proc, env)
        status, exports, _ = typed([*CLI, "emulator", "--env"], env)
        for name in ("CREATEOS_SANDBOX_BASE_URL", "CREATEOS_API_URL"):
            assert f"export {name}={record['url']}\n" in exports
        for name in ("CREATEOS_SANDBOX_API_KEY", "CREATEOS_API_KEY"):
            assert f"export {name}={record['api_key']}\n" in exports
        with Client(record["api_key"], record["url"]) as client:
            client.create_disk("cache", bucket="b", endpoint="https://s3.example.com",
                               access_key="AK", secret_key="SK")  # fmt: skip
            client.create_network("net")
            run = [*CLI, "run", "--local", "--disk", "cache:/mnt/c", "--network", "net", "--keep"]
            status, out, err = typed([*run, "--", "echo warm > /mnt/c/f"], env)
            assert status == 0, err
            kept = out.split()[0]
            status, token, err = typed([*CLI, "token", "create", "--local", kept], env)
            assert status == 0 and token.strip() and token.strip() not in err, err
            with Client(token.strip(), record["url"]) as delegated:
                assert delegated.sandbox(kept).id == kept
            assert typed([*CLI, "destroy", "--local", kept], env)[0] == 0
