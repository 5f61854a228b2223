"""An Agents SDK sandbox agent, driven by a scripted model (no network), whose shell tool
runs in a CreateOS sandbox through ``CreateOSSandboxClient``, on an emulator."""

from __future__ import annotations

import pytest

pytest.importorskip("agents.sandbox", reason="the [openai-agents] extra is not installed")
anyio = pytest.importorskip("anyio")

import io  # noqa: E402
from pathlib import Path  # noqa: E402

from agents import RunConfig, Runner, set_tracing_disabled  # noqa: E402
from agents.sandbox import SandboxAgent, SandboxRunConfig  # noqa: E402
from agents.sandbox.capabilities import Shell  # noqa: E402
from agents.testing.model import ScriptedModel, assistant_message, function_call  # noqa: E402

from createos_sync import Client  # noqa: E402
from createos_sync.emulator import Emulator  # noqa: E402
from createos_sync.integrations.openai_agents import (  # noqa: E402
    CreateOSSandboxClient,
    CreateOSSandboxClientOptions,
)

COMMAND = "echo written by the agent > note.txt && cat note.txt"


def test_a_scripted_agent_runs_its_shell_tool_in_a_sandbox(
    emulator: Emulator, shared_client: Client
) -> None:
    set_tracing_disabled(True)
    model = ScriptedModel(
        [
            [function_call("exec_command", {"cmd": COMMAND}, call_id="call-1")],
            [assistant_message("done")],
        ]
    )
    agent = SandboxAgent(
        name="worker", instructions="Use the shell.", model=model, capabilities=[Shell()]
    )
    client = CreateOSSandboxClient()

    async def scenario() -> tuple[str, str | None, bytes]:
        session = await client.create(options=CreateOSSandboxClientOptions(ttl=None))
        async with session:
            config = RunConfig(sandbox=SandboxRunConfig(session=session))
            result = await Runner.run(agent, "write a note", run_config=config)
            sandbox_id = session._inner.lease.id  # type: ignore[attr-defined]
            assert sandbox_id in emulator.live_sandboxes()
            note = (await session.read(Path("note.txt"))).read()
        return str(result.final_output), sandbox_id, note

    answer, sandbox_id, note = anyio.run(scenario)

    assert answer == "done"
    assert note == b"written by the agent\n"  # what the tool wrote, read back from the sandbox
    output = next(
        item["output"]
        for item in model.last_call.input  # type: ignore[union-attr]
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    )
    assert "written by the agent" in str(output)
    assert sandbox_id not in emulator.live_sandboxes()  # destroyed when the session shut down


def test_a_workspace_persisted_from_one_sandbox_hydrates_another(
    emulator: Emulator, shared_client: Client
) -> None:
    client = CreateOSSandboxClient()
    options = CreateOSSandboxClientOptions(ttl=None)

    async def scenario() -> bytes:
        first = await client.create(options=options)
        async with first:
            await first.write(Path("notes/a.txt"), io.BytesIO(b"kept across sandboxes"))
            archive = await first.persist_workspace()
        second = await client.create(options=options)
        async with second:
            await second.hydrate_workspace(archive)
            return bytes((await second.read(Path("notes/a.txt"))).read())

    assert anyio.run(scenario) == b"kept across sandboxes"
    assert emulator.live_sandboxes() == []
