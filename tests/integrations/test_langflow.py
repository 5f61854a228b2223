"""A judge we did not write: the CreateOS sandbox backend for Langflow, unchanged, on an emulator.

``langflow-sandbox-createos`` 0.2.0 talks to the service with httpx and takes
only a 200 as success (issue 38). Driven here through its code paths that run
without Langflow's server: ``backend.run`` (one throwaway sandbox per run) and
the reuse of a sandbox by name with its own ``SandboxClient`` (the calls its
component's "flow" session mode makes: find by name, resume a paused guest).
The package reads its configuration from the environment; its settings default
to no network, and the backend refuses that policy unless the operator accepts
the link-local exception, as a user of it would.
"""

from __future__ import annotations

import pytest

pytest.importorskip(
    "langflow_sandbox_createos",
    reason="langflow-sandbox-createos is not installed (.ci/integrations.sh langflow)",
)

import time
import uuid
from collections.abc import Iterator

import httpx
from langflow_sandbox_createos import CreateOSBackend, create_backend
from langflow_sandbox_createos._client import SandboxClient
from lfx.utils.sandbox.base import SandboxUnavailableError

from createos_sync.emulator import Emulator


@pytest.fixture
def configured(emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    """The backend's environment pointed at the emulator; no sandbox left when done."""
    monkeypatch.setenv("CREATEOS_SANDBOX_API_KEY", emulator.api_key)
    monkeypatch.setenv("CREATEOS_SANDBOX_BASE_URL", emulator.url)
    monkeypatch.setenv("LANGFLOW_SANDBOX_CREATEOS_ACCEPT_EGRESS_EXCEPTIONS", "true")
    yield emulator
    assert emulator.live_sandboxes() == []


@pytest.fixture
def backend(configured: Emulator) -> Iterator[CreateOSBackend]:
    backend = create_backend()
    yield backend
    backend.shutdown()


def test_backend_run_returns_output_env_and_exit_code(backend: CreateOSBackend) -> None:
    printed = backend.run("import sys\nprint(sum(range(10)))\nprint('err', file=sys.stderr)")
    greeted = backend.run("import os\nprint(os.environ['GREETING'])", env={"GREETING": "hello"})
    failed = backend.run("print('before')\nraise SystemExit(3)")

    assert (printed.stdout, printed.stderr, printed.exit_code) == ("45\n", "err\n", 0)
    assert (greeted.stdout, greeted.exit_code) == ("hello\n", 0)
    assert (failed.stdout, failed.exit_code) == ("before\n", 3)
    assert failed.error_message() == "Sandboxed execution failed with exit code 3"


def test_a_sandbox_is_found_by_name_paused_resumed_and_keeps_its_files(
    configured: Emulator,
) -> None:
    name = f"lf-{uuid.uuid4().hex[:19]}"  # the component's shape: 22 characters, the limit
    pauser = httpx.Client(base_url=configured.url, headers={"X-Api-Key": configured.api_key})
    client = SandboxClient()
    try:
        sandbox_id = client.create(
            shape="s-1vcpu-1gb", name=name, egress=["*"], auto_pause_seconds=600
        )["id"]
        try:
            found = client.find_by_name(name)
            assert found is not None and found["id"] == sandbox_id
            with pytest.raises(SandboxUnavailableError, match=r"\(409\)"):
                client.create(shape="s-1vcpu-1gb", name=name, egress=["*"])
            client.upload(sandbox_id, "/workspace/state.txt", b"kept")

            # The package never pauses (the service does, when the guest idles out).
            pauser.post(f"/v1/sandboxes/{sandbox_id}/pause").raise_for_status()
            deadline = time.monotonic() + 10
            while client.get(sandbox_id)["status"] != "paused":
                assert time.monotonic() < deadline, "the sandbox did not pause"
                time.sleep(0.05)
            paused = client.find_by_name(name)
            assert paused is not None and (paused["id"], paused["status"]) == (sandbox_id, "paused")

            assert client.resume(sandbox_id)["status"] == "running"
            assert client.download(sandbox_id, "/workspace/state.txt") == b"kept"
            ran = client.exec(sandbox_id, "cat", ["/workspace/state.txt"], timeout_seconds=30)
            assert (ran["stdout"], ran["exit_code"]) == ("kept", 0)
        finally:
            client.destroy(sandbox_id)
        assert client.find_by_name(name) is None
    finally:
        client.close()
        pauser.close()
