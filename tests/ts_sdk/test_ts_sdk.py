"""The official TypeScript SDK, unchanged, against the emulator: a judge we did not write.

``flows.mjs`` drives ``@nodeops-createos/sandbox`` (the version ``package.json`` here
pins) through the API's flows: creation, exec and streamed exec, files, pause and resume,
fork, templates, egress, ingress previews, disks, networks, tokens, resize, bandwidth, SSH
keys, lookup by ip, lists and errors mapped to its own classes. npm installs the SDK into a
cache directory, never into the source tree (``$XDG_CACHE_HOME`` or ``~/.cache``, under
``createos-sync``): ``.ci/ts-sdk.sh`` does it beside the suite, and this test on
first use otherwise, under the same lock. Without node, the test is skipped.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from createos_sync.emulator import Emulator
from createos_sync.emulator._machine.isolation import Bubblewrap

HERE = Path(__file__).parent
PACKAGE = HERE / "package.json"
SDK = "@nodeops-createos/sandbox"
FLOWS = (
    "catalog", "create-devbox", "names", "exec", "exec-stream", "files", "pause-resume",
    "background-server", "fork", "template-nodeops", "template-debian", "egress",
    "ingress-preview", "disks", "networks", "access-token", "resize", "bandwidth",
    "ssh-pubkeys", "by-ip", "list-pages", "auto-pause", "destroy", "errors", "users",
)  # fmt: skip
FLOWS_TIMEOUT = 900.0
INSTALL_TIMEOUT = 600.0


def sdk_version() -> str:
    version: str = json.loads(PACKAGE.read_text())["dependencies"][SDK]
    return version


def sdk_dir() -> Path:
    """Where the pinned SDK is installed (``.ci/ts-sdk.sh`` computes the same place)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "createos-sync" / f"ts-sdk-{sdk_version()}"


def installed_version(where: Path) -> str | None:
    manifest = where / "node_modules" / SDK / "package.json"
    try:
        version: str = json.loads(manifest.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None
    return version


def install(where: Path) -> None:
    """npm-install the pinned SDK into ``where`` unless it is there (under a lock shared
    with ``.ci/ts-sdk.sh``, which may be installing it right now)."""
    where.mkdir(parents=True, exist_ok=True)
    with open(where / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if installed_version(where) == sdk_version():
            return
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail(f"node is here but npm is not: install {SDK} with .ci/ts-sdk.sh")
        shutil.copyfile(PACKAGE, where / "package.json")
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
        )
        assert done.returncode == 0, f"npm install of {SDK} failed:\n{done.stderr[-2000:]}"


def run_flows(node: str, emu: Emulator, where: Path, *flows: str) -> dict[str, dict[str, object]]:
    """Each flow's JSON line, by name. Only the emulator's URL and key reach node: never
    a CREATEOS_* variable of the caller's (it could name the real service)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "CREATEOS_TS_SDK_DIR": str(where),
        "CREATEOS_SANDBOX_BASE_URL": emu.url,
        "CREATEOS_SANDBOX_API_KEY": emu.api_key,
    }
    done = subprocess.run(
        [node, str(HERE / "flows.mjs"), *flows],
        env=env,
        capture_output=True,
        text=True,
        timeout=FLOWS_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {str(line["flow"]): line for line in lines}


def test_the_official_typescript_sdk_passes_its_flows_on_the_emulator() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the official TypeScript SDK cannot run")
    listed = subprocess.run(
        [node, str(HERE / "flows.mjs"), "--list"], capture_output=True, text=True, timeout=60
    )
    assert tuple(json.loads(listed.stdout)) == FLOWS, listed.stderr
    where = sdk_dir()
    install(where)
    with Emulator(rate_limit=None) as emu:
        # Users need the emulator run as root under bubblewrap (``_machine.userns``).
        wanted = FLOWS if _has_users(emu) else tuple(f for f in FLOWS if f != "users")
        results = run_flows(node, emu, where, *wanted)
        assert emu.live_sandboxes() == []  # every flow destroyed what it made, through the SDK
    assert set(results) == set(wanted)
    failed = {name: line for name, line in results.items() if not line["ok"] or "cleanup" in line}
    assert not failed, "\n".join(
        f"{name}: {line.get('error') or ''} {line.get('cleanup') or ''}"
        for name, line in failed.items()
    )


def _has_users(emu: Emulator) -> bool:
    isolation = emu._require_store().isolation
    return isinstance(isolation, Bubblewrap) and isolation.has_users
