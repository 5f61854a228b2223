"""The ``createos`` sandbox's configuration: YAML, a Dockerfile built once, env, setup, workdir."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("inspect_ai", reason="the [inspect] extra is not installed")
anyio = pytest.importorskip("anyio")

from createos_sync import Client  # noqa: E402
from createos_sync.emulator import Emulator  # noqa: E402
from createos_sync.integrations.inspect import CreateOSSandboxEnvironment as Env  # noqa: E402


async def _in_sample(config: str, argv: list[str]) -> str:
    """Run ``argv`` in the sandbox of one sample made from ``config``; its stdout."""
    await Env.task_init("startup", config)
    envs = await Env.sample_init("config", config, {})
    try:
        result = await envs["default"].exec(argv)
        assert result.success, result.stderr
        return result.stdout
    finally:
        await Env.sample_cleanup("config", config, envs, False)


def test_a_yaml_config_sets_env_setup_and_workdir(
    emulator: Emulator, shared_client: Client, tmp_path: Path
) -> None:
    config = tmp_path / "createos.yaml"
    config.write_text(
        "ttl: null\nenv:\n  GREETING: hello\nworkdir: /workspace/project\n"
        "setup: |\n  echo prepared > ready.txt\n"
    )

    out = anyio.run(
        _in_sample, str(config), ["sh", "-c", 'echo "$GREETING $(pwd) $(cat ready.txt)"']
    )

    assert out == "hello /workspace/project prepared\n"
    assert emulator.live_sandboxes() == []


def test_a_dockerfile_is_built_once_and_every_sample_starts_from_it(
    emulator: Emulator, shared_client: Client, tmp_path: Path
) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM ubuntu:24.04\nRUN echo built > /workspace/marker\n")

    first = anyio.run(_in_sample, str(dockerfile), ["cat", "/workspace/marker"])
    second = anyio.run(_in_sample, str(dockerfile), ["cat", "/workspace/marker"])

    assert first == second == "built\n"
    assert len(shared_client.templates()) == 1
    assert emulator.live_sandboxes() == []


def test_an_unknown_setting_is_refused_before_any_sandbox(
    emulator: Emulator, shared_client: Client, tmp_path: Path
) -> None:
    config = tmp_path / "createos.yaml"
    config.write_text("shpae: s-1vcpu-1gb\n")

    with pytest.raises(ValueError, match="shpae"):
        anyio.run(Env.sample_init, "config", str(config), {})
    assert emulator.live_sandboxes() == []
