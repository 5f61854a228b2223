"""The Emulator object and the standalone command line."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from createos_sync._wire.pacer import MachinePacer, shared_pacer
from createos_sync.emulator import Emulator
from createos_sync.emulator._service.ratelimit import RateLimiter

from ..waiting import wait_until
from .helpers import Api


def test_client_is_configured_for_the_emulator(emu: Emulator) -> None:
    client = emu.client()
    try:
        assert "s-1vcpu-1gb" in [shape.id for shape in client.shapes()]
    finally:
        client.close()


def test_a_closed_emulator_leaves_no_request_budget_record(
    make_emu: Callable[..., Emulator],
) -> None:
    """Its port is never the same twice: its record would only pile up (issue 24)."""
    emu = make_emu()
    with emu.client() as client:
        client.shapes()
        record = shared_pacer(client.config.base_url, 300)
        assert isinstance(record, MachinePacer) and record.record.path.exists()
    emu.close()
    assert not record.record.path.exists()


def test_temp_root_is_removed_and_root_dir_is_kept(
    make_emu: Callable[..., Emulator], tmp_path: Path
) -> None:
    emu = make_emu()
    sandbox_id = Api(emu).sandbox()
    temp_storage = emu.sandbox_path(sandbox_id, "/workspace")
    assert temp_storage.is_dir()
    emu.close()
    assert not temp_storage.exists()
    kept = make_emu(root_dir=tmp_path / "root")
    sandbox_id = Api(kept).sandbox()
    kept.close()
    assert (tmp_path / "root" / sandbox_id / "workspace").is_dir()


def test_a_failed_start_leaves_no_directory_and_no_janitor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where mkdtemp makes them
    with pytest.raises(RuntimeError, match="private network needs bubblewrap"):
        Emulator(isolation="none", network="private", tls=True).start()
    assert list(tmp_path.iterdir()) == []
    assert not [pid for pid in _children() if str(tmp_path) in _cmdline(pid)]


def _children() -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                parent = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid():
            found.append(int(name))
    return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_a_closed_emulator_leaves_no_thread_descriptor_or_process(tmp_path: Path) -> None:
    """Processes, a terminal, an exec, a preview URL, a template build, guest agents and
    private networks all end with ``close()``: nothing of the emulator stays behind."""
    threads, fds = set(threading.enumerate()), set(os.listdir("/proc/self/fd"))
    children = set(_children())
    emu = Emulator(rate_limit=None, heartbeat_interval=0.2).start()
    try:
        api = Api(emu)
        sandbox_id = api.sandbox(ingress_enabled=True)
        api.frames(sandbox_id, api.process(sandbox_id, "bash", "-c", "sleep 1000 & echo up"))
        api.frames(sandbox_id, api.process(sandbox_id, "true", pty={"rows": 5, "cols": 9}))
        api.data("POST", f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "true"})
        port = str(20_000 + secrets.randbelow(20_000))  # no other test's, on a shared network
        api.process(sandbox_id, "python3", "-m", "http.server", port, "--bind", "127.0.0.1")
        preview = f"{emu.url}/_ingress/{sandbox_id}/{port}/"
        wait_until(lambda: api.session.get(preview, timeout=10).ok, what="the preview URL")
        with emu.client() as client:
            client.build_template("leftovers", "FROM ubuntu:24.04\nRUN true\n")
        api.session.close()
    finally:
        emu.close()

    def leftovers() -> list[object]:
        new_fds = set(os.listdir("/proc/self/fd")) - fds
        return [
            *(t.name for t in set(threading.enumerate()) - threads if t.name != "createos-cutoff"),
            *(os.readlink(f"/proc/self/fd/{fd}") for fd in new_fds if _is_open(fd)),
            *(_cmdline(pid) for pid in set(_children()) - children),
        ]

    with contextlib.suppress(pytest.fail.Exception):  # some threads end a moment later
        wait_until(lambda: not leftovers(), what="nothing left", timeout=10)
    assert leftovers() == []


def _is_open(fd: str) -> bool:
    return os.path.exists(f"/proc/self/fd/{fd}")


def test_sandbox_path_maps_the_three_trees(emu: Emulator) -> None:
    sandbox_id = Api(emu).sandbox()
    home = emu.sandbox_path(sandbox_id, "/home/user/.bashrc")
    assert home.parent == emu.sandbox_path(sandbox_id, "/home/user")
    with pytest.raises(ValueError, match="is not under /workspace, /tmp or /home/user"):
        emu.sandbox_path(sandbox_id, "/etc/passwd")
    with pytest.raises(KeyError):
        emu.sandbox_path("sb-nope", "/workspace")


def test_rate_limiter_window_slides() -> None:
    now = [0.0]
    limiter = RateLimiter(2, clock=lambda: now[0])
    assert limiter.admit("a") is None
    now[0] = 30.0
    assert limiter.admit("a") is None
    assert limiter.admit("a") == 30
    assert limiter.admit("b") is None  # per client address
    now[0] = 60.5
    assert limiter.admit("a") is None
    assert limiter.admit("a") == 30


def test_command_line_serves_until_sigterm() -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "createos_sync.emulator", "--api-key", "k-123",
            "--no-rate-limit", "--isolation", "none"]  # fmt: skip
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    ) as proc:
        try:
            assert proc.stdout is not None
            lines = [proc.stdout.readline() for _ in range(3)]
            match = re.search(
                r"export CREATEOS_API_URL=(\S+) CREATEOS_SANDBOX_BASE_URL=\1 "
                r"CREATEOS_API_KEY=(\S+) CREATEOS_SANDBOX_API_KEY=\2$",
                lines[2],
            )
            assert match, lines
            url, key = match.groups()
            assert key == "k-123"
            assert lines[1].strip() == "isolation: none"
            reply = requests.get(url + "/v1/sandboxes", headers={"X-Api-Key": key}, timeout=10)
            assert reply.status_code == 200
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


def test_command_line_refuses_a_public_host() -> None:
    from createos_sync.emulator.__main__ import main

    assert main(["--host", "0.0.0.0"]) == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"isolation": "chroot"}, "isolation must be 'auto', 'bwrap' or 'none', not 'chroot'"),
        ({"frame_bytes": 0}, "need 1 <= frame_bytes <= journal_bytes"),
        ({"journal_bytes": 1024, "frame_bytes": 2048}, "need 1 <= frame_bytes <= journal_bytes"),
        (
            {"journal_bytes": 4 << 20, "frame_bytes": 1 << 20},
            "need 1 <= frame_bytes <= journal_bytes and <= 768 KiB",
        ),
        ({"heartbeat_interval": 0}, "heartbeat_interval > 0"),
    ],
)
def test_bad_options_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Emulator(**kwargs)  # type: ignore[arg-type]
