"""Cancellation at Inspect's await points leaves nothing behind (inspect_ai#5494's leak).

The SDK's calls block worker threads that a cancellation cannot interrupt:
the adapter closes the lease from another thread instead (or, for an
``exec``, sets the run's ``cs.Cancel``, which wakes it to end the command's
tree), and only then lets the cancellation propagate.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai", reason="the [inspect] extra is not installed")
anyio = pytest.importorskip("anyio")

from createos_sync import Client  # noqa: E402
from createos_sync.emulator import Emulator  # noqa: E402
from createos_sync.integrations import _threads  # noqa: E402
from createos_sync.integrations.inspect import (  # noqa: E402
    CreateOSSandboxConfig,
    CreateOSSandboxEnvironment,
)

from ..integration.helpers import FAST, operations, processes_of  # noqa: E402
from ..waiting import wait_until  # noqa: E402

NO_TTL = CreateOSSandboxConfig(ttl=None)  # no watchdog process: every process is the test's


@pytest.fixture
def slow(tmp_path: Path) -> Iterator[Emulator]:
    """An emulator whose sandboxes stay ``creating`` for 2 s: a cancellation lands in open()."""
    with (
        Emulator(rate_limit=None, transition_delay=2.0) as emu,
        emu.client(requests_per_minute=FAST, rate_scope="process") as client,
    ):
        _threads.use_client(client)
        try:
            yield emu
        finally:
            _threads.use_client(None)


async def _cancel_once(started: Callable[[], Awaitable[object]], ready: Callable[[], bool]) -> None:
    """Run ``started()`` and cancel it once ``ready()`` (checked from the event loop)."""
    async with anyio.create_task_group() as group:
        group.start_soon(started)
        while not ready():
            await anyio.sleep(0.02)
        group.cancel_scope.cancel()


def test_cancelled_while_the_sandbox_is_being_made(slow: Emulator) -> None:
    async def sample_init() -> None:
        await CreateOSSandboxEnvironment.sample_init("t", NO_TTL, {})
        pytest.fail("sample_init was not cancelled")

    anyio.run(_cancel_once, sample_init, lambda: bool(slow.live_sandboxes()))

    assert slow.live_sandboxes() == []


def test_cancelled_during_the_setup_script(emulator: Emulator, shared_client: Client) -> None:
    config = CreateOSSandboxConfig(ttl=None, setup="sleep 600")

    async def sample_init() -> None:
        await CreateOSSandboxEnvironment.sample_init("t", config, {})
        pytest.fail("sample_init was not cancelled")

    anyio.run(_cancel_once, sample_init, lambda: bool(emulator.live_processes()))

    assert emulator.live_sandboxes() == []
    assert emulator.live_processes() == []


def test_a_cancelled_exec_ends_its_process_and_the_sandbox_stays_usable(
    emulator: Emulator, shared_client: Client
) -> None:
    async def scenario() -> None:
        envs = await CreateOSSandboxEnvironment.sample_init("t", NO_TTL, {})
        sandbox = envs["default"]
        lease_id = sandbox.lease.id  # type: ignore[attr-defined]
        try:
            await _cancel_once(
                lambda: sandbox.exec(["sh", "-c", "setsid sleep 600 & sleep 600"]),
                lambda: bool(processes_of(emulator, lease_id)),
            )
            assert processes_of(emulator, lease_id) == []  # ended before the cancellation
            emulator.clear_request_log()
            assert (await sandbox.exec(["echo", "still here"])).stdout == "still here\n"
            assert operations(emulator) == [("process.input", 200)]  # 1 request per exec
        finally:
            await CreateOSSandboxEnvironment.sample_cleanup("t", NO_TTL, envs, True)

    anyio.run(scenario)

    assert emulator.live_sandboxes() == []


KILLED_EVAL = """
import anyio, sys
from createos_sync.integrations.inspect import CreateOSSandboxEnvironment as Env
envs = anyio.run(Env.sample_init, "killed", None, {})
print(envs["default"].lease.id, flush=True)
sys.stdin.read()
"""


def test_inspect_sandbox_cleanup_destroys_what_a_killed_eval_left(
    emulator: Emulator, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CREATEOS_")}
    env.update(
        CREATEOS_API_URL=emulator.url,
        CREATEOS_API_KEY=emulator.api_key,
        CREATEOS_SYNC_STATE_DIR=str(tmp_path / "state"),
    )
    killed = subprocess.Popen(
        [sys.executable, "-c", KILLED_EVAL],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert killed.stdout is not None
    sandbox_id = killed.stdout.readline().strip()
    os.kill(killed.pid, signal.SIGKILL)  # no cleanup of any kind runs
    killed.wait()
    assert emulator.live_sandboxes() == [sandbox_id]

    done = subprocess.run(
        [str(Path(sys.executable).with_name("inspect")), "sandbox", "cleanup", "createos"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    wait_until(lambda: emulator.live_sandboxes() == [], "the sandbox destroyed", timeout=10)


@pytest.mark.parametrize("cleanup", [True, False])
def test_task_cleanup_ends_what_no_sample_cleanup_did(
    emulator: Emulator, shared_client: Client, cleanup: bool
) -> None:
    async def scenario() -> str | None:
        envs = await CreateOSSandboxEnvironment.sample_init("t", NO_TTL, {})
        # Inspect skips sample_cleanup with --no-sandbox-cleanup, and when a run is cut short
        await CreateOSSandboxEnvironment.task_cleanup("shutdown", NO_TTL, cleanup)
        return envs["default"].lease.id  # type: ignore[attr-defined,no-any-return]

    sandbox_id = anyio.run(scenario)

    if cleanup:
        assert emulator.live_sandboxes() == []
    else:  # --no-sandbox-cleanup: kept for the user to look into
        assert emulator.live_sandboxes() == [sandbox_id]
        shared_client.destroy(sandbox_id or "")
