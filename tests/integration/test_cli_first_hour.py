"""What a new user's first hour with the command line tripped on (issue 24), typed as they
type it, in subprocesses against the session emulator."""

from __future__ import annotations

import http.server
import json
import os
import signal
import stat
import subprocess
import threading
from pathlib import Path

from createos_sync import Client
from createos_sync.config import normalize_base_url
from createos_sync.emulator import Emulator
from createos_sync.journal import Entry, Journal

from .subprocesses import CLI, DEADLINE, read_until


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
    assert (status, out) == (2, "") and "no such template tpl-nope" in err, err
    assert client.delete_template("tpl-nope") is False  # in Python: gone is fine, and said


def without_key() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CREATEOS_")}
    return {**env, "CREATEOS_SYNC_STATE_DIR": os.environ["CREATEOS_SYNC_STATE_DIR"]}


def test_every_command_works_offline_on_the_standalone_emulator() -> None:
    env = without_key()
    assert typed([*CLI, "emulator", "--env"], env)[0] == 1  # none serves yet
    status, out, err = typed([*CLI, "ls", "--local"], env)
    assert (status, out) == (2, "") and "`createos-sync emulator`" in err, err
    serving = subprocess.Popen(
        [*CLI, "emulator", "--no-rate-limit", "--isolation", "none", "--network", "shared"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        read_until(serving, b"recorded in ")
        record = Path(env["CREATEOS_SYNC_STATE_DIR"]) / "emulators" / f"{serving.pid}.json"
        assert stat.S_IMODE(record.stat().st_mode) == 0o600  # it holds the key
        status, exports, _ = typed([*CLI, "emulator", "--env"], env)
        assert status == 0 and exports.startswith("export CREATEOS_API_URL=http://127.0.0.1:")
        assert "export CREATEOS_API_KEY=" in exports
        status, _, err = typed([*CLI, "ls"], env)  # no key, no --local: pointed at it
        assert status == 2 and "add --local" in err and "(one serves at http://127.0.0.1:" in err

        status, _, err = typed([*CLI, "run", "--local", "--keep", "--", "true"], env)
        assert status == 0, err
        kept = err.split("keeping sandbox ")[1].split()[0]
        assert "destroy --local " + kept in err
        status, out, err = typed([*CLI, "ls", "--local"], env)
        assert status == 0 and kept in out, err
        assert typed([*CLI, "destroy", "--local", kept], env)[:2] == (0, f"destroyed {kept}\n")

        dockerfile = b"FROM ubuntu:24.04\nRUN echo built > /workspace/b\n"
        build = [*CLI, "template", "build", "t", "-f", "-", "--local"]
        status, _, err = typed(build, env, dockerfile)
        assert status == 0, err
        template_id = err.split("template ")[1].split()[0]
        status, out, _ = typed([*CLI, "template", "ls", "--local"], env)
        assert template_id in out
        removed = typed([*CLI, "template", "rm", "--local", template_id], env)
        assert removed[:2] == (0, f"deleted {template_id}\n")
        status, out, _ = typed([*CLI, "shapes", "--local"], env)
        assert status == 0 and "s-1vcpu-1gb" in out
        status, out, err = typed([*CLI, "reap", "--local"], env)
        assert (status, out) == (0, "the lease journal is empty: nothing to reap\n"), err
    finally:
        serving.send_signal(signal.SIGTERM)
        serving.communicate(timeout=DEADLINE)
    assert not record.exists()  # withdrawn when it stops


def test_reap_dry_run_needs_no_key(emulator: Emulator) -> None:
    url = normalize_base_url(emulator.url)
    gone = Entry(name="n", base_url=url, sandbox_id="sb-x", pid=2**22 + 1)
    Journal().add(gone)
    env = {**without_key(), "CREATEOS_API_URL": emulator.url}
    status, out, err = typed([*CLI, "reap", "--dry-run"], env)
    assert status == 0 and out.startswith("would destroy sb-x: its owner"), err
    assert Journal().entries() == [gone]


def test_cli_wording(emulator: Emulator, env: dict[str, str], tmp_path: Path) -> None:
    status, _, err = typed([*CLI, "run", "--shape", "nope", "--", "true"], env)
    assert status == 2 and err.splitlines()[1:] == ["see `createos-sync run --help`"], err
    status, _, err = typed([*CLI, "template", "build", "x", "--bogus"], env)
    assert status == 2 and err.splitlines()[1:] == ["see `createos-sync template build --help`"]
    for command in (["destroy", ""], ["template", "rm", "\x1b[2J"]):  # no traceback, no request
        status, _, err = typed([*CLI, *command], env)
        assert status == 2 and "not an id: " in err and "\x1b" not in err, err
    status, _, err = typed([*CLI, "ls"], {**env, "CREATEOS_API_KEY": "k-wrong-0123456789"})
    assert status == 1 and err.count("the API key was rejected") == 1, err  # said once
    unreachable = {**env, "CREATEOS_API_URL": "http://127.0.0.1:9"}
    status, _, err = typed([*CLI, "ls"], unreachable)
    assert status == 1 and "could not connect to the service at http://127.0.0.1:9" in err, err
    status, _, err = typed([*CLI, "run", "--debug", "--download", "/nope:x", "--", "true"], env)
    assert status == 1 and "Traceback" in err and "downloading /nope to x failed" in err, err

    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "kept.txt").write_text("mine")
    emulator.clear_request_log()
    for destination in (tmp_path / "full", tmp_path / "no" / "such"):
        download = f"/workspace/out:{destination}"
        status, _, err = typed([*CLI, "run", "--download", download, "--", "true"], env)
        assert status == 2 and str(destination) in err.splitlines()[0], err
    assert emulator.request_log == []  # refused before any sandbox was made


HOSTILE = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\u202eevil\x9b31m"


class _HostileListing(http.server.BaseHTTPRequestHandler):
    """A compromised service: every listing's strings carry terminal attacks."""

    def do_GET(self) -> None:
        if self.path.startswith("/v1/sandboxes"):
            item = {"id": "sb-1" + HOSTILE, "status": "running" + HOSTILE, "shape": HOSTILE,
                    "name": "n" + HOSTILE, "created_at": "2026-01-01T00:00:00Z"}  # fmt: skip
        elif self.path.startswith("/v1/templates"):
            item = {"id": "tpl-1" + HOSTILE, "status": "ready", "name": "t" + HOSTILE,
                    "base": HOSTILE}  # fmt: skip
        else:
            item = {"id": HOSTILE, "vcpu": 1, "memory_mib": 1024}
        body = json.dumps({"status": "success", "data": [item]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


def test_listings_never_print_the_service_s_escape_sequences() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HostileListing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        env = {**without_key(), "CREATEOS_API_URL": url, "CREATEOS_API_KEY": "k-0123456789"}
        for command in (["ls"], ["template", "ls"], ["shapes"], ["ls", "--json"]):
            status, out, err = typed([*CLI, *command], env)
            assert status == 0, err
            assert out.isascii() and "\x1b" not in out and "\x07" not in out, (command, out)
            assert "(unrecognised)" in out or "--json" in command
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_mistyped_subcommand_gets_a_did_you_mean(env: dict[str, str]) -> None:
    status, out, err = typed([*CLI, "rnu", "--", "true"], env)
    assert (status, out) == (2, "") and err.splitlines()[0].endswith("; did you mean 'run'?")
    status, _, err = typed([*CLI, "template", "biuld", "x"], env)
    assert status == 2 and err.splitlines()[0].endswith("; did you mean 'build'?")
