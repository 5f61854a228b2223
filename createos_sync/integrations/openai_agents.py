"""OpenAI Agents SDK: ``CreateOSSandboxClient``, a sandbox client for its sandbox agents.

``pip install 'createos-sync[openai-agents]'``, then::

    from agents import RunConfig, Runner
    from agents.sandbox import SandboxRunConfig
    from createos_sync.integrations.openai_agents import CreateOSSandboxClient

    run_config = RunConfig(sandbox=SandboxRunConfig(client=CreateOSSandboxClient()))
    await Runner.run(agent, "...", run_config=run_config)

Each session is a lease on a sandbox of its own (shape, rootfs, egress and
ttl from ``CreateOSSandboxClientOptions``), opened when the session starts
and closed (its processes terminated, the sandbox destroyed) when it shuts
down or the client deletes it. A command the agent runs goes through the
lease's command session (1 request; 3 for the first, 2 more to end one timed
out or cancelled): a cancelled tool call terminates its process tree, and
the cancellation propagates once that is confirmed. A session
resumed from its saved state attaches to the same sandbox while it exists.
"""

from __future__ import annotations

import io
import posixpath
import shlex
import uuid
from pathlib import Path
from typing import Literal

from createos_sync.errors import missing_extra

try:
    from agents.sandbox.manifest import Manifest
    from agents.sandbox.session import SandboxSession, SandboxSessionState
    from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
    from agents.sandbox.session.sandbox_client import BaseSandboxClient, BaseSandboxClientOptions
    from agents.sandbox.snapshot import SnapshotBase, SnapshotSpec, resolve_snapshot
    from agents.sandbox.types import ExecResult, User
except ModuleNotFoundError as exc:
    raise missing_extra("openai-agents", __name__, exc) from None

import createos_sync as cs

from . import _files, _threads

_NO_LIMIT = 7 * 24 * 3600.0
_READ_LIMIT = 1 << 40  # the SDK bounds its own reads (read_bounded)


class CreateOSSandboxClientOptions(BaseSandboxClientOptions):
    """How each session's sandbox is made."""

    type: Literal["createos"] = "createos"
    shape: str | None = None
    rootfs: str | None = None
    egress: tuple[str, ...] | None = None
    ttl: float | None = 900


class CreateOSSandboxSessionState(SandboxSessionState):
    """What resuming needs: the options, and the sandbox once it exists."""

    type: Literal["createos"] = "createos"
    options: CreateOSSandboxClientOptions = CreateOSSandboxClientOptions()
    sandbox_id: str | None = None


class CreateOSSandboxSession(BaseSandboxSession):
    """One sandbox agent's workspace: a lease."""

    state: CreateOSSandboxSessionState
    lease: cs.Lease

    def __init__(self, *, state: CreateOSSandboxSessionState) -> None:
        self.state = state
        options = state.options
        if state.sandbox_id is not None:  # resumed: the same sandbox, destroyed at shutdown
            self.lease = _threads.shared_client().lease(
                sandbox_id=state.sandbox_id, on_exit="destroy", ttl=options.ttl
            )
        else:
            self.lease = _threads.shared_client().lease(
                options.shape,
                rootfs=options.rootfs,
                name="openai-agents",
                egress=options.egress,
                ttl=options.ttl,
            )

    async def _ensure_backend_started(self) -> None:
        if self.lease.id is None:
            await _threads.opened(self.lease)
            self.state.sandbox_id = self.lease.id

    async def _shutdown_backend(self) -> None:
        await _threads.close(self.lease)

    async def running(self) -> bool:
        return self.lease.id is not None and not self.lease.closed

    async def _exec_internal(
        self, *command: str | Path, timeout: float | None = None
    ) -> ExecResult:
        result = await _threads.run(
            self.lease,
            [str(part) for part in command],
            timeout=timeout if timeout is not None else _NO_LIMIT,
            cwd=self.state.manifest.root,
        )
        return ExecResult(
            stdout=result.stdout.encode("utf-8", "surrogateescape"),
            stderr=result.stderr.encode("utf-8", "surrogateescape"),
            exit_code=_threads.returncode(result),
        )

    async def read(self, path: Path, *, user: str | User | None = None) -> io.IOBase:
        data = await _threads.call(_files.read, self.lease, self._absolute(path), _READ_LIMIT)
        return io.BytesIO(data)

    async def write(self, path: Path, data: io.IOBase, *, user: str | User | None = None) -> None:
        payload = data.read()
        raw = payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)
        await _threads.call(_files.write, self.lease, self._absolute(path), raw)

    async def persist_workspace(self) -> io.IOBase:
        """The workspace as a tar stream of workspace-relative names."""
        archive = f"/tmp/.createos-workspace-{uuid.uuid4().hex}.tar"
        root = shlex.quote(self.state.manifest.root)
        await self._checked(f"tar -C {root} -cf {shlex.quote(archive)} .")
        try:
            data = await _threads.call(_files.read, self.lease, archive, _READ_LIMIT)
        finally:
            await self._checked(f"rm -f -- {shlex.quote(archive)}")
        return io.BytesIO(data)

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        archive = f"/tmp/.createos-workspace-{uuid.uuid4().hex}.tar"
        payload = data.read()
        raw = payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)
        await _threads.call(_files.write, self.lease, archive, raw)
        root = shlex.quote(self.state.manifest.root)
        await self._checked(
            f"mkdir -p {root} && tar -C {root} -xf {shlex.quote(archive)}; "
            f"s=$?; rm -f -- {shlex.quote(archive)}; exit $s"
        )

    async def _checked(self, script: str) -> None:
        result = await _threads.run(self.lease, script, timeout=_NO_LIMIT)
        if not result.ok:
            raise RuntimeError(f"workspace archive step failed in sandbox {self.lease.id}")

    def _absolute(self, path: Path | str) -> str:
        return posixpath.normpath(posixpath.join(self.state.manifest.root, str(path)))


class CreateOSSandboxClient(BaseSandboxClient[CreateOSSandboxClientOptions | None]):
    """Sandbox sessions on CreateOS (the SDK's ``SandboxRunConfig(client=...)``)."""

    backend_id = "createos"
    supports_default_options = True

    async def create(
        self,
        *,
        snapshot: SnapshotSpec | SnapshotBase | None = None,
        manifest: Manifest | None = None,
        options: CreateOSSandboxClientOptions | None = None,
    ) -> SandboxSession:
        manifest = self._validate_manifest_for_create(manifest or Manifest())
        session_id = uuid.uuid4()
        state = CreateOSSandboxSessionState(
            session_id=session_id,
            manifest=manifest,
            snapshot=resolve_snapshot(snapshot, str(session_id)),
            options=options or CreateOSSandboxClientOptions(),
        )
        return self._wrap_session(CreateOSSandboxSession(state=state))

    async def delete(self, session: SandboxSession) -> SandboxSession:
        inner = session._inner
        if not isinstance(inner, CreateOSSandboxSession):
            raise TypeError("CreateOSSandboxClient.delete expects a CreateOSSandboxSession")
        await _threads.close(inner.lease)
        return session

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        if not isinstance(state, CreateOSSandboxSessionState):
            raise TypeError("CreateOSSandboxClient.resume expects a CreateOSSandboxSessionState")
        return self._wrap_session(CreateOSSandboxSession(state=state))

    def deserialize_session_state(self, payload: dict[str, object]) -> SandboxSessionState:
        return self._deserialize_session_state_payload(payload, CreateOSSandboxSessionState)
