"""Harbor: ``CreateOSEnvironment``, each trial in a CreateOS sandbox (a lease).

``harbor run -p TASK -a AGENT --env
createos_sync.integrations.harbor:CreateOSEnvironment`` (older Harbor:
``--environment-import-path``). The task's ``environment/Dockerfile``
becomes a template, built once and reused while its text is the same
(named by its hash); what the template builder cannot do, ``COPY`` and
``ADD`` from the build context, is applied after the sandbox starts by
uploading those files. A task with ``docker_image`` starts from that image
(a CreateOS base image). ``stop(delete=False)`` keeps the sandbox.

Options (``--ek KEY=VALUE``): ``shape``, ``ttl`` (seconds, the lease's dead
man's switch; 0 turns it off), ``egress`` (comma-separated rules).

Every promise of a lease holds: the journal, the ttl watchdog, the
machine's request budget, a command cancelled by Harbor's timeouts has its
process tree terminated (and confirmed before the cancellation propagates),
and a start cancelled halfway destroys what it made. ``exec`` costs 1
request in the trial's command session (3 for the first, 2 more to end one
timed out or cancelled), as ``Lease.run``.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import shlex
import tempfile
from pathlib import Path
from typing import Any

from createos_sync.errors import missing_extra

try:
    from harbor.environments.base import BaseEnvironment, ExecResult
    from harbor.environments.capabilities import EnvironmentCapabilities
    from harbor.environments.definition import require_agent_environment_definition
    from harbor.environments.options import EnvironmentOptions
except ModuleNotFoundError as exc:
    raise missing_extra("harbor", __name__, exc) from None

import createos_sync as cs

from . import _files, _threads

_NO_LIMIT = 7 * 24 * 3600.0
_CONTEXT = re.compile(r"^\s*(COPY|ADD)\s+(.*)$", re.IGNORECASE | re.DOTALL)
_WORKDIR = re.compile(r"^\s*WORKDIR\s+(\S+)\s*$", re.IGNORECASE)


class CreateOSOptions(EnvironmentOptions):
    """``--ek`` options of the CreateOS environment."""

    shape: str | None = None
    ttl: float | None = 900
    egress: str | None = None


class CreateOSEnvironment(BaseEnvironment):
    """A Harbor environment on a CreateOS sandbox."""

    options_model = CreateOSOptions
    options: CreateOSOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lease: cs.Lease | None = None

    @staticmethod
    def type() -> str:
        return "createos"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities()

    def _validate_definition(self) -> None:
        require_agent_environment_definition(
            self.environment_dir, docker_image=self.task_env_config.docker_image
        )

    async def start(self, force_build: bool) -> None:
        dockerfile = self.environment_dir / "Dockerfile"
        copies: list[tuple[str, str]] = []
        rootfs = self.task_env_config.docker_image
        if dockerfile.is_file():
            text, copies, workdir = _split(dockerfile.read_text(encoding="utf-8"))
            rootfs = await _threads.call(_template, text, force_build)
        else:
            workdir = None
        egress = (
            [r.strip() for r in self.options.egress.split(",")] if self.options.egress else None
        )
        lease = _threads.shared_client().lease(
            self.options.shape,
            rootfs=rootfs,
            name=_name(self.environment_name),
            egress=egress,
            env=self.task_env_config.env or None,
            ttl=self.options.ttl or None,
        )
        await _threads.opened(lease)
        self._lease = lease
        try:
            if self.task_env_config.workdir:
                await self.exec(
                    f"mkdir -p -- {shlex.quote(self.task_env_config.workdir)}", user="root"
                )
            for source, target in copies:
                await self._copy_in(source, target, workdir)
            await self.ensure_dirs(self._mount_targets(writable_only=True))
            await self._upload_environment_dir_after_start()
        except BaseException as exc:
            self._lease = None
            await _threads.close(lease, exc)
            raise

    async def stop(self, delete: bool) -> None:
        lease, self._lease = self._lease, None
        if lease is None:
            return
        await _threads.shielded(lease.close, on_exit="destroy" if delete else "keep")

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        lease = self._require()
        user = self._resolve_user(user)
        who = None if user is None or str(user) in ("root", "0") else str(user)
        result = await _threads.run(
            lease,
            _files.as_user(who, ["/bin/bash", "-c", command]),
            timeout=float(timeout_sec) if timeout_sec is not None else _NO_LIMIT,
            cwd=cwd or self.task_env_config.workdir,
            env=self._merge_env(env),
        )
        return ExecResult(
            stdout=result.stdout, stderr=result.stderr, return_code=_threads.returncode(result)
        )

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        data = Path(source_path).read_bytes()
        await _threads.call(_files.write, self._require(), target_path, data)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        await _threads.call(self._require().upload_dir, str(source_dir), target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        data = await _threads.call(_files.read, self._require(), source_path, 1 << 62)
        target = Path(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        lease = self._require()
        target = Path(target_dir)
        with tempfile.TemporaryDirectory(prefix="createos-harbor-") as scratch:
            fresh = Path(scratch) / "dir"
            await _threads.call(lease.download_dir, source_dir, str(fresh))
            target.mkdir(parents=True, exist_ok=True)
            for path in sorted(fresh.rglob("*")):  # merged: Harbor's targets may exist already
                destination = target / path.relative_to(fresh)
                if path.is_dir() and not path.is_symlink():
                    destination.mkdir(parents=True, exist_ok=True)
                else:
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    path.replace(destination)

    async def _copy_in(self, source: str, target: str, workdir: str | None) -> None:
        """One ``COPY source target`` of the Dockerfile, from the task's build context."""
        local = (self.environment_dir / source).resolve()
        if not local.is_relative_to(self.environment_dir.resolve()):
            raise ValueError(f"COPY {source}: outside the task's environment directory")
        if not posixpath.isabs(target):
            target = posixpath.join(workdir or "/", target)
        if local.is_dir():
            await self.upload_dir(local, target)
        elif target.endswith("/"):
            await self.upload_file(local, posixpath.join(target, local.name))
        else:
            await self.upload_file(local, target)

    def _require(self) -> cs.Lease:
        if self._lease is None:
            raise RuntimeError("the CreateOS sandbox is not running: call start() first")
        return self._lease


def _split(dockerfile: str) -> tuple[str, list[tuple[str, str]], str | None]:
    """The Dockerfile without its ``COPY``/``ADD`` steps, those steps, and the last WORKDIR."""
    kept: list[str] = []
    copies: list[tuple[str, str]] = []
    workdir = None
    for line in re.sub(r"\\\n", " ", dockerfile).splitlines():
        step = _CONTEXT.match(line)
        if step is None:
            kept.append(line)
            found = _WORKDIR.match(line)
            workdir = found.group(1) if found else workdir
            continue
        words = shlex.split(step.group(2))
        if any(w.startswith("--") for w in words) or len(words) < 2:
            raise ValueError(
                f"cannot apply {line.strip()!r} after start (no flags, sources and a target)"
            )
        copies += [(source, words[-1]) for source in words[:-1]]
    return "\n".join(kept) + "\n", copies, workdir


def _template(dockerfile: str, force: bool) -> str:
    """The id of a ready template built from ``dockerfile``, built only when none is."""
    client = _threads.shared_client()
    name = "harbor-" + hashlib.sha256(dockerfile.encode("utf-8")).hexdigest()[:16]
    if not force:
        ready = [t for t in client.templates() if t.name == name and t.status == "ready"]
        if ready:
            return ready[0].id
    return client.build_template(name, dockerfile).id


def _name(environment: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "-_." else "-" for c in environment)
    return f"harbor-{cleaned}"[:13]  # a lease's name prefix: the service keeps names to 22
