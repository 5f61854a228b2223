"""One template build: the Dockerfile's steps, run for real in a scratch sandbox.

``FROM`` picks the base (a root file system of the catalog, or a ready
template, whose layers and files the build starts from; a catalog base whose
promise this machine cannot keep is refused, see ``bases``; an allowlisted
Docker base, ``catalog.DOCKER_BASES``, means the body's ``base``); each ``RUN`` is a
real process in the scratch sandbox, with the ``ENV``/``ARG`` values and the
``WORKDIR`` set so far, in a network of the build's own as a sandbox's
(``_netns``: private where the emulator gives sandboxes one) but with no
guest agent; its output becomes log lines as it comes. Under
bubblewrap with overlays, what a step writes anywhere lands in the scratch
sandbox's layer, which becomes the template's. Without overlays only the
storage trees (``/workspace``, ``/tmp``, ``/home/user``) are kept, and a
``WORKDIR`` elsewhere fails the build (it could not be created).
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import time
from pathlib import Path

from .._machine.journal import End, Frame
from .._machine.layers import PRIVATE, UPPER, remove_tree
from .._machine.netns import Network
from .._machine.processes import Command, StdinClosed
from .._machine.storage import PathRefused, Storage
from . import bases
from .catalog import DEFAULT_ROOTFS, DOCKER_BASES, ROOTFS_NAMES
from .dockerfile import (
    DockerfileError,
    Instruction,
    assignments,
    from_image,
    parse,
    run_argv,
    workdir,
)
from .templates import Template, TemplateStore

log = logging.getLogger("createos_sync.emulator")

READ_TIMEOUT = 0.2
MAX_SHOWN = 200


class BuildFailed(Exception):
    """The build cannot go on; the message is the log line that says why."""


class Build:
    """Runs on its own thread; leaves the template ``ready`` or ``failed``, never in between."""

    def __init__(self, template: Template, templates: TemplateStore, *, frame_bytes: int) -> None:
        self.template = template
        self.templates = templates
        self.store = templates.sandboxes
        self.frame_bytes = frame_bytes
        self.storage = Storage(template.root)
        self.net: Network | None = None  # its steps' network, made for the first one

    def run(self) -> None:
        template = self.template
        template.status = "building"
        status, last = "failed", "build failed"
        try:
            self._build()
            status, last = "ready", f"template {template.id} is ready"
        except BuildFailed as exc:
            template.log.add(str(exc), level="error")
        except Exception:
            log.exception("template build %s failed", template.id)
            template.log.add("the emulator failed while building", level="error")
        finally:
            if self.net is not None:
                self.net.close()
            self.store.isolation.release(self.storage)
            self._settle(status)
            template.log.finish(last, template.status)

    def _settle(self, status: str) -> None:
        template = self.template
        for private in PRIVATE:
            remove_tree(template.root / private)
        if status == "ready" and not template.cancelled.is_set():
            template.lowers = (template.root / UPPER, *self.storage.lowers)
            template.size = _size(template.root)
            template.built_at = time.time()
            template.status = "ready"
        else:
            template.status = "failed"
            remove_tree(template.root)

    def _build(self) -> None:
        template = self.template
        try:
            steps = parse(template.dockerfile)
            base = self._base(steps)
        except DockerfileError as exc:
            raise BuildFailed(f"Dockerfile {exc}") from None
        template.log.add(f"building {template.name!r} on {template.base}")
        variables: dict[str, str] = {}
        for number, step in enumerate(steps, 1):
            if template.cancelled.is_set():
                raise BuildFailed("the build was cancelled")
            template.log.add(f"STEP {number}/{len(steps)}: {step.text()[:MAX_SHOWN]}")
            try:
                self._step(step, base, variables)
            except DockerfileError as exc:
                raise BuildFailed(f"Dockerfile {exc}") from None

    def _base(self, steps: list[Instruction]) -> Template | None:
        """Resolve FROM (or the body's ``base``); set up the scratch storage on it."""
        template = self.template
        named = [from_image(s) for s in steps if s.keyword == "FROM"]
        # An allowlisted Docker base is built on the rootfs the body's ``base`` names.
        docker = bool(named) and named[0] in DOCKER_BASES
        chosen = named[0] if named and not docker else None
        image = chosen or template.requested_base or DEFAULT_ROOTFS
        rootfs = _rootfs(image)
        if chosen and template.requested_base and _rootfs(template.requested_base) != rootfs:
            given = template.requested_base[:64]
            raise DockerfileError(steps[0].line, f"FROM {image[:64]} disagrees with base {given}")
        parent = None if rootfs in ROOTFS_NAMES else self.templates.find(rootfs)
        if rootfs not in ROOTFS_NAMES and (parent is None or parent.status != "ready"):
            line = steps[0].line if named else 1
            known = ", ".join((*ROOTFS_NAMES, *DOCKER_BASES))
            raise DockerfileError(
                line, f"unknown base image {image[:64]!r} (known: {known}, or a ready template)"
            )
        broken = bases.broken_promise(rootfs)
        if broken is not None:
            line = steps[0].line if named else 1
            can = ", ".join(bases.honoured())
            raise DockerfileError(line, f"{broken}: the bases it can honour here are {can}")
        template.base = rootfs
        self.storage = Storage(template.root, parent.lowers if parent is not None else ())
        self.storage.create()
        if parent is not None:
            self.storage.seed_from(parent.root)
            template.env, template.workdir = dict(parent.env), parent.workdir
        return parent

    def _step(self, step: Instruction, base: Template | None, variables: dict[str, str]) -> None:
        template = self.template
        known = {**variables, **template.env}
        if step.keyword == "RUN":
            argv = run_argv(step)
            code, error = self._run(argv, {**variables, **template.env})
            if code != 0:
                shown = " ".join(argv[2:] if argv[:2] == ["/bin/sh", "-c"] else argv)[:MAX_SHOWN]
                raise BuildFailed(f"RUN failed ({error or f'exit code {code}'}): {shown}")
        elif step.keyword == "ENV":
            template.env.update(assignments(step, known))
        elif step.keyword == "ARG":
            for name, value in assignments(step, known).items():
                variables[name] = value or variables.get(name, "")
        elif step.keyword == "WORKDIR":
            target = workdir(step, template.workdir, known)
            self._make_dir(target)
            template.workdir = target
        elif step.keyword != "FROM":
            template.log.add(f"{step.keyword} has no effect on a sandbox: skipped")

    def _make_dir(self, path: str) -> None:
        if self.storage.host_path(path) is not None:  # made beneath the storage, as files are
            try:
                self.storage.make_dirs(path)
            except (OSError, PathRefused):
                raise BuildFailed(
                    f"WORKDIR {path[:MAX_SHOWN]} could not be created: a symlink leads out "
                    "of the sandbox's tree (or it is not a directory)"
                ) from None
            return
        if self.store.isolation.overlays is None:
            raise BuildFailed(
                f"WORKDIR {path[:MAX_SHOWN]} is outside /workspace, /tmp and /home/user: that "
                "needs the emulator's writable layer (bubblewrap with overlayfs), missing here"
            )
        code, error = self._run(["mkdir", "-p", "--", path], {}, cwd="/")
        if code != 0:
            raise BuildFailed(f"WORKDIR {path[:MAX_SHOWN]} could not be created ({error or code})")

    def _run(
        self, argv: list[str], env: dict[str, str], *, cwd: str | None = None
    ) -> tuple[int, str | None]:
        """Run one command in the scratch sandbox, its output logged line by line."""
        template = self.template
        command = Command(argv[0], argv[1:], cwd or template.workdir, env)
        process = self.store.new_process("exec", command)
        reader = process.journal.attach(0)  # before it starts: no output is lost
        lines = _Lines(template)
        try:
            if self.net is None:  # a network as a sandbox's, without a guest agent
                self.net = self.store.networks.create(agent=False)
            self.store.start_unlisted(self.storage, process, self.net)
            with contextlib.suppress(StdinClosed):  # it may have ended already
                process.close_stdin()  # a step has no input: EOF at once
            while not isinstance(item := reader.next(READ_TIMEOUT), End):
                if template.cancelled.is_set():
                    raise BuildFailed("the build was cancelled")
                if isinstance(item, Frame):
                    lines.feed(item.stream, item.data)
        finally:
            reader.close()
            process.stop()
        lines.flush()
        return item.exec_status()


class _Lines:
    """A step's output, cut into log lines per stream as it arrives."""

    def __init__(self, template: Template) -> None:
        self.template = template
        self.pending = {"stdout": "", "stderr": ""}
        self.decoders = {s: codecs.getincrementaldecoder("utf-8")("replace") for s in self.pending}

    def feed(self, stream: str, data: bytes) -> None:
        text = self.pending[stream] + self.decoders[stream].decode(data)
        *complete, self.pending[stream] = text.split("\n")
        for line in complete:
            self.template.log.add(line.rstrip("\r"))

    def flush(self) -> None:
        for stream in self.pending:
            rest = self.pending[stream] + self.decoders[stream].decode(b"", final=True)
            if rest:
                self.template.log.add(rest.rstrip("\r"))


def _rootfs(image: str) -> str:
    """A catalog name for a Docker-style image name (``ubuntu:24.04`` -> ``ubuntu-24.04``)."""
    return image.replace(":", "-") if image.replace(":", "-") in ROOTFS_NAMES else image


def _size(root: Path) -> int:
    return sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())
