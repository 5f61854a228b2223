"""Inspect AI: the sandbox environment ``createos``, each sample in a sandbox of its own.

``pip install 'createos-sync[inspect]'`` registers it (entry point group
``inspect_ai``), so ``Task(..., sandbox="createos")``, or
``sandbox=("createos", "createos.yaml")`` with a ``CreateOSSandboxConfig``
in YAML, runs every sample in its own sandbox: a lease, with the journal,
the ttl watchdog and the machine's request budget. ``sandbox=("createos",
"Dockerfile")`` builds that Dockerfile into a template once (reused while
its content is the same) and starts every sample from it.

Containment where Inspect's providers leak: a sample cancelled while its
sandbox is being made (``sample_init``) closes its lease before the
cancellation propagates, even though the worker thread making it cannot be
interrupted; a cancelled ``exec`` terminates its process tree;
``sample_cleanup`` destroys the sandbox and raises when that cannot be
confirmed; ``inspect sandbox cleanup createos`` destroys what an eval killed
with SIGKILL left, from the lease journal (and the ttl watchdog deletes it
anyway once renewals stop).

What CreateOS forces: commands run as root (``exec(user=...)`` runs them
through ``runuser``), so a file's missing read or write permission does not
stop ``read_file`` and ``write_file`` (Inspect's Docker provider says the
same as root). ``user:`` in the config makes another user the default one
(commands and transfers then run as that user; transfers cost more
requests, see ``_files``).

Request budget: ``exec`` 1 in the lease's command session (its stdin inline;
none given is an empty stdin, so that no command waits for input), 3 for a
sample's first command (which starts the session), 2 more when a timeout or a
cancellation ends it; an ``exec`` while another runs in the sample's sandbox
takes a managed process (3, 4 with stdin). ``write_file`` and ``read_file``
cost 1 each; a sample costs its lease's open and close besides. ``exec``'s ``timeout_retry`` is not
needed (a timeout here is the command's, never a hung transport: the SDK
reconnects on its own) and ``concurrency`` is for local sandboxes.
``task_cleanup`` ends what no ``sample_cleanup`` did, keeping the sandboxes
(and printing their ids) under ``--no-sandbox-cleanup``.
"""

from __future__ import annotations

import errno
import hashlib
import os
import posixpath
import shlex
import threading
from pathlib import Path
from typing import Any, ClassVar, Literal, overload

from createos_sync.errors import missing_extra

try:
    import yaml
    from inspect_ai.util import (
        ExecResult,
        OutputLimitExceededError,
        SandboxConnection,
        SandboxEnvironment,
        SandboxEnvironmentConfigType,
        SandboxEnvironmentLimits,
        SandboxUnavailableError,
        SandboxUserUnsupportedError,
        sandboxenv,
    )
    from pydantic import BaseModel, ConfigDict
except ModuleNotFoundError as exc:
    raise missing_extra("inspect", __name__, exc) from None

import createos_sync as cs

from . import _files, _threads

_NO_LIMIT = 7 * 24 * 3600.0  # Inspect's exec without a timeout: a week, not the SDK's 300 s


class CreateOSSandboxConfig(BaseModel):
    """How each sample's sandbox is made (YAML: the same keys)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    shape: str | None = None
    """Machine shape (default ``CREATEOS_SHAPE``, then ``s-1vcpu-1gb``)."""
    rootfs: str | None = None
    """A base image (``ubuntu:24.04``) or a ready template's id."""
    template: str | None = None
    """A ready template, by name (the newest ready one of that name)."""
    dockerfile: str | None = None
    """A Dockerfile built into a template once (reused while its content is the same)."""
    egress: list[str] | None = None
    """Outbound rules (host names, ``*.`` wildcards, CIDRs); None allows all."""
    env: dict[str, str] = {}
    """Variables every command sees."""
    setup: str | None = None
    """A bash script run in each sample's sandbox before the sample starts."""
    workdir: str = "/workspace"
    """The per-sample working directory: relative paths and ``cwd`` resolve there."""
    ttl: float | None = 900
    """The lease's dead man's switch (seconds); None turns it off."""
    max_lifetime: float | None = None
    """Destroy the sandbox this many seconds after it was made, whatever runs."""
    user: str | None = None
    """Who commands and file transfers run as when ``exec`` names nobody (default:
    root, CreateOS's only user; it must exist, e.g. made by ``setup``)."""


@sandboxenv(name="createos")
class CreateOSSandboxEnvironment(SandboxEnvironment):
    """One sample's CreateOS sandbox (a lease)."""

    # (service, Dockerfile content hash) -> template id
    _templates: ClassVar[dict[tuple[str, str], str]] = {}
    _templates_lock = threading.Lock()
    # Samples not cleaned up yet. Inspect calls task_cleanup("shutdown", ...) once at
    # the end of the whole run, not per task name: it sees every one of them.
    _open: ClassVar[set[cs.Lease]] = set()

    def __init__(self, lease: cs.Lease, config: CreateOSSandboxConfig) -> None:
        super().__init__()
        self.lease = lease
        self.config = config

    @classmethod
    def config_files(cls) -> list[str]:
        return ["createos.yaml", "createos.yml"]

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return CreateOSSandboxConfig(**config)

    @classmethod
    def default_concurrency(cls) -> int | None:
        return 16

    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        settings = _settings(config)
        if settings.dockerfile is not None:
            await _threads.call(cls._template, settings.dockerfile)

    @classmethod
    async def sample_init(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, metadata: dict[str, str]
    ) -> dict[str, SandboxEnvironment]:
        settings = _settings(config)
        rootfs = settings.rootfs
        if settings.dockerfile is not None:
            rootfs = await _threads.call(cls._template, settings.dockerfile)
        elif settings.template is not None:
            rootfs = await _threads.call(_template_named, settings.template)
        lease = _threads.shared_client().lease(
            settings.shape,
            rootfs=rootfs,
            name=_name(task_name),
            egress=settings.egress,
            env=settings.env,
            ttl=settings.ttl,
            max_lifetime=settings.max_lifetime,
        )
        await _threads.opened(lease)
        try:
            prepare = f"mkdir -p -- {shlex.quote(settings.workdir)}"
            if settings.setup is not None:
                prepare = f"{prepare} && cd -- {shlex.quote(settings.workdir)}\n{settings.setup}"
            if settings.setup is not None or settings.workdir != "/workspace":
                result = await _threads.call(lease.run, prepare, timeout=_NO_LIMIT)
                if not result.ok:
                    raise RuntimeError(
                        f"the setup script failed in sandbox {lease.id} (exit {result.exit_code}):"
                        f"\n{result.stderr[-2000:]}"
                    )
        except BaseException as exc:
            await _threads.close(lease, exc)
            raise
        cls._open.add(lease)
        return {"default": cls(lease, settings)}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        leases = [e.as_type(CreateOSSandboxEnvironment).lease for e in environments.values()]
        await _close_all(leases)

    @classmethod
    async def task_cleanup(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool
    ) -> None:
        """Samples Inspect did not clean up: destroyed, or kept by ``--no-sandbox-cleanup``."""
        left = list(cls._open)
        if not cleanup:
            for lease in left:
                print(f"kept sandbox {lease.id} (createos-sync destroy {lease.id})")
        await _close_all(left, on_exit=None if cleanup else "keep")

    @classmethod
    async def cli_cleanup(cls, id: str | None) -> None:
        client = _threads.shared_client()
        if id is not None:
            await _threads.shielded(client.destroy, id)
            return
        outcomes = await _threads.shielded(cs.reap, client)
        for outcome in outcomes:
            print(outcome.describe())
        failed = [o for o in outcomes if o.needs_attention]
        if failed:
            raise RuntimeError(f"{len(failed)} journal entries need attention (see above)")

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        if not cmd:
            raise ValueError("exec needs a command")
        user = user if user is not None else self.config.user
        argv = _files.as_user(user, list(cmd))
        workdir = self._path(cwd) if cwd is not None else self.config.workdir
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE  # a context variable: read it here
        try:
            result = await _threads.run(
                self.lease,
                argv,
                timeout=timeout if timeout is not None else _NO_LIMIT,
                cwd=workdir,
                env=env,
                stdin=input if input is not None else b"",
                max_output=limit,
            )
        except (cs.SandboxUnavailable, cs.LeaseClosed, cs.CreateosCleanupError) as exc:
            raise SandboxUnavailableError(
                f"sandbox {self.lease.id} cannot run commands: {exc}"
            ) from exc
        returncode = _threads.returncode(result)
        if returncode in (1, 126) and _not_executable(result.stderr, cmd[0]):
            raise PermissionError(errno.EACCES, f"Permission denied executing {cmd[0]}")
        if user is not None and returncode == 127 and "runuser: not found" in result.stderr:
            raise SandboxUserUnsupportedError(f"this sandbox has no runuser to run as {user!r}")
        return ExecResult(returncode == 0, returncode, result.stdout, result.stderr)

    async def write_file(self, file: str, contents: str | bytes) -> None:
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        await self._transfer(
            _files.write, self._path(file), data, shown=file, user=self.config.user
        )

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        if posixpath.basename(file.rstrip("/")) in (".", "..") or file.endswith("/"):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), file)
        limit = SandboxEnvironmentLimits.MAX_READ_FILE_SIZE
        try:
            data: bytes = await self._transfer(
                _files.read, self._path(file), limit, shown=file, user=self.config.user
            )
        except _files.FileTooLarge:
            raise OutputLimitExceededError(
                limit_str=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, truncated_output=None
            ) from None
        return data.decode("utf-8") if text else data

    async def connection(self, *, user: str | None = None) -> SandboxConnection:
        if self.lease.closed or self.lease.id is None:
            raise ConnectionError("the sandbox is not running")
        if user not in (None, "root", "0"):
            raise NotImplementedError(
                "createos-sync shell opens a shell as the sandbox's user only"
            )
        command = shlex.join(["createos-sync", "shell", self.lease.id])
        return SandboxConnection(type="createos", command=command, container=self.lease.id)

    def default_polling_interval(self) -> float:
        return 0.5

    async def _transfer(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await _threads.call(fn, self.lease, *args, **kwargs)
        except (cs.SandboxUnavailable, cs.LeaseClosed) as exc:
            raise SandboxUnavailableError(f"sandbox {self.lease.id} is gone: {exc}") from exc
        except cs.OperationTimeout as exc:
            raise TimeoutError(str(exc)) from exc

    def _path(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self.config.workdir, path))

    @classmethod
    def _template(cls, dockerfile: str) -> str:
        """The id of a ready template built from ``dockerfile`` (built at most once)."""
        content = Path(dockerfile).read_text(encoding="utf-8")
        digest = hashlib.sha256(content.encode("utf-8")).hexdigest()[:16]
        client = _threads.shared_client()
        key = (client.config.base_url, digest)
        with cls._templates_lock:
            if key not in cls._templates:
                name = f"inspect-{digest}"
                cls._templates[key] = _template_named(name, missing_ok=True) or (
                    client.build_template(name, content).id
                )
            return cls._templates[key]


async def _close_all(leases: list[cs.Lease], on_exit: Literal["keep"] | None = None) -> None:
    """Close every lease (each shielded), then raise the first failure: none is silent."""
    failures: list[BaseException] = []
    for lease in leases:
        CreateOSSandboxEnvironment._open.discard(lease)
        try:
            await _threads.shielded(lease.close, on_exit=on_exit)
        except Exception as exc:
            failures.append(exc)
    if failures:
        raise failures[0]


def _template_named(name: str, *, missing_ok: bool = False) -> str | None:
    ready = [
        t for t in _threads.shared_client().templates() if t.name == name and t.status == "ready"
    ]
    if ready:
        return max(ready, key=lambda t: str(t.created_at)).id
    if missing_ok:
        return None
    raise ValueError(f"no ready template is named {name!r}")


def _settings(config: SandboxEnvironmentConfigType | None) -> CreateOSSandboxConfig:
    """The config Inspect gives: None, our model, a YAML file, or a Dockerfile."""
    if config is None:
        return CreateOSSandboxConfig()
    if isinstance(config, CreateOSSandboxConfig):
        return config
    if isinstance(config, BaseModel):
        return CreateOSSandboxConfig(**config.model_dump())
    path = Path(config)
    if path.name == "Dockerfile" or path.suffix == ".Dockerfile":
        return CreateOSSandboxConfig(dockerfile=str(path))
    loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(loaded, dict):
        raise ValueError(f"{config}: a createos sandbox config is a mapping of settings")
    settings = CreateOSSandboxConfig(**loaded)
    if settings.dockerfile is not None and not Path(settings.dockerfile).is_absolute():
        settings = settings.model_copy(
            update={"dockerfile": str(path.parent / settings.dockerfile)}
        )
    return settings


def _name(task_name: str) -> str:
    """A sandbox name prefix from the task's name: ``inspect-`` and what the service allows."""
    cleaned = "".join(c if c.isalnum() or c in "-_." else "-" for c in task_name)
    return f"inspect-{cleaned}"[:13]  # a lease's name prefix: the service keeps names to 22


def _not_executable(stderr: str, program: str) -> bool:
    """bash's (exit 126) or runuser's (exit 1) own words for a file it may not execute."""
    lines = stderr.splitlines()
    return any(
        line.endswith(f": {program}: cannot execute: Permission denied") for line in lines
    ) or (f"runuser: failed to execute {program}: Permission denied" in lines)
