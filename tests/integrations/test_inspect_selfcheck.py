"""Inspect AI's own conformance suite for sandbox providers, run against ``createos``.

Every check of ``inspect_ai.util._sandbox.self_check`` runs on one sandbox
of the default configuration (root, as CreateOS runs commands), and the
checks a user's permissions decide run again with ``user:`` set to a user
the setup script makes. Each check passes, or is marked with the reason the
CreateOS API forces.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("inspect_ai", reason="the [inspect] extra is not installed")
anyio = pytest.importorskip("anyio")

from inspect_ai.util import SandboxEnvironment  # noqa: E402
from inspect_ai.util._sandbox.self_check import *  # noqa: E402, F403

from createos_sync import Client  # noqa: E402
from createos_sync.emulator import Emulator  # noqa: E402
from createos_sync.integrations.inspect import (  # noqa: E402
    CreateOSSandboxConfig,
    CreateOSSandboxEnvironment,
)

pytestmark = pytest.mark.anyio

AS_ROOT = (
    "CreateOS runs commands (and its files API) as root, whom a file's permissions do "
    "not stop; Inspect's own Docker provider marks the same checks as root. They pass "
    "with `user:` in the config (the [user] run of this check)"
)
ROOT_ONLY = {
    "test_read_file_not_allowed": AS_ROOT,
    "test_write_text_file_without_permissions": AS_ROOT,
    "test_write_binary_file_without_permissions": AS_ROOT,
}
# What a user's permissions decide; the [user] configuration reruns only these.
BY_USER = {
    *ROOT_ONLY,
    "test_exec_as_user",
    "test_exec_as_nonexistent_user",
    "test_exec_permission_error",
    "test_read_and_write_file_text",
    "test_read_and_write_file_binary",
    "test_read_and_write_file_including_directory_absolute",
    "test_read_and_write_file_including_directory_relative",
    "test_read_file_is_directory",
    "test_read_file_not_found",
    "test_write_text_file_is_directory",
    "test_exec_input_binary",
    "test_cwd_unspecified",
    "test_cwd_relative",
}
USER = "inspect-user"
CONFIGS = {
    "root": CreateOSSandboxConfig(),
    "user": CreateOSSandboxConfig(
        user=USER,
        # /tmp is where transfers stage their files; the workdir must be the user's.
        setup=f"useradd -m {USER} && chown {USER} /workspace && chmod 1777 /tmp",
    ),
}
ON_THE_HOST = (
    "the emulator runs commands on this host itself (no bubblewrap here): adding a user "
    "would change the host"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


HARDENED = (
    "the emulator's bubblewrap sandbox, run as root, keeps no capability and maps root "
    "alone into its user namespace, so a command cannot add a user or become one (the "
    "service's microVMs can): checked where the emulator runs unprivileged or on the service"
)


@pytest.fixture(scope="module")
def no_other_users(emulator: Emulator, shared_client: Client) -> str | None:
    """Why a sandbox's commands cannot add and become another user here, or None."""
    if emulator.isolation != "bwrap":
        return ON_THE_HOST
    with shared_client.lease() as box:
        probe = box.run("useradd -m createos-probe && runuser -u createos-probe -- true")
    return None if probe.exit_code == 0 else HARDENED


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def configured(
    request: pytest.FixtureRequest, emulator: Emulator, no_other_users: str | None
) -> Iterator[tuple[str, SandboxEnvironment | None]]:
    """One sandbox per configuration, shared by its checks (made as Inspect makes it)."""
    name = request.param
    if name == "user" and no_other_users:
        yield name, None
        return
    config = CONFIGS[name]
    envs = anyio.run(CreateOSSandboxEnvironment.sample_init, "self-check", config, {})
    try:
        yield name, envs["default"]
    finally:
        anyio.run(CreateOSSandboxEnvironment.sample_cleanup, "self-check", config, envs, False)
    assert emulator.live_sandboxes() == []


@pytest.fixture
def sandbox_env(
    request: pytest.FixtureRequest,
    configured: tuple[str, SandboxEnvironment | None],
    no_other_users: str | None,
) -> SandboxEnvironment:
    name, env = configured
    check = request.node.originalname
    if name == "user" and check not in BY_USER:
        pytest.skip("runs as root and as a user alike: checked in the [root] configuration")
    if env is None or (check == "test_exec_as_user" and no_other_users):
        pytest.skip(no_other_users or ON_THE_HOST)
    if name == "root" and check in ROOT_ONLY:
        request.applymarker(pytest.mark.xfail(reason=ROOT_ONLY[check], strict=True))
    return env
