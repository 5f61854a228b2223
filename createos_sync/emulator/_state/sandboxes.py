"""Sandboxes: records, asynchronous status transitions, storage and processes.

A transition (``creating``, ``forking``, ``pausing``, ``resuming``, ``destroying``) takes
effect at once on the processes and files (pause really SIGSTOPs every
process, destroy kills them and removes the storage), while the reported
status reaches its target only after ``transition_delay``, as on the service.
A creation alone is answered only once it has (``started``), as on the service.
Idle sandboxes with ``auto_pause_after_seconds`` are paused by a background
ticker; idle means no API request for that sandbox, no attached stream and
no open exchange through its preview URLs. ``configure`` (the PATCH
endpoint) changes ingress and auto-pause on a live sandbox.

Each sandbox has a network (``_netns``: a private namespace, or the host's)
and a guest agent listening in it (``_agent``), made when the sandbox is
added and released when it is destroyed; its commands start inside that
network.
"""

from __future__ import annotations

import contextlib
import itertools
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from .._machine.agent import GuestAgents
from .._machine.isolation import Isolation
from .._machine.netns import Network, Networks
from .._machine.processes import Command, ManagedProcess
from .._machine.storage import Storage
from .._wire import ApiError
from .sandbox import ForkChanges, LiveProcess, Sandbox, SandboxSpec

TICK = 1.0
NAME_TAKEN = "name is already used by a live sandbox"


class SandboxStore:
    """Every sandbox of one emulator, thread-safe."""

    def __init__(
        self,
        root: Path,
        isolation: Isolation,
        *,
        transition_delay: float,
        journal_bytes: int,
        frame_bytes: int,
        network: str = "auto",
    ) -> None:
        self._root = root
        self.isolation = isolation
        self.networks = Networks(network, isolation)
        self._agents = GuestAgents(self._agent_request)
        self._delay = transition_delay
        self._journal_bytes = journal_bytes
        self._frame_bytes = frame_bytes
        self._lock = threading.Lock()
        self._sandboxes: dict[str, Sandbox] = {}
        self._counter = itertools.count(2)
        # Called as a sandbox is destroyed, before its network goes (disks, networks, tokens).
        self.on_destroy: list[Callable[[Sandbox], None]] = []
        self.on_close: list[Callable[[], None]] = []
        # Set by the server once its address is known: the ingress URL template, with
        # "<sandbox id>" to fill in (``previews``).
        self.ingress_base = ""
        self._closed = threading.Event()
        # bubblewrap's --die-with-parent fires when the THREAD that spawned it
        # ends, so every process is spawned by this one long-lived thread
        # rather than by the request's thread.
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="emulator-spawner")
        self._ticker = threading.Thread(target=self._tick, name="emulator-autopause", daemon=True)
        self._ticker.start()

    @property
    def root(self) -> Path:
        """The directory the sandboxes' storage (and the disks' buckets) live under."""
        return self._root

    # -- lookup ------------------------------------------------------------

    def get(self, sandbox_id: str) -> Sandbox:
        """Any known sandbox, destroyed ones included; 404 otherwise."""
        with self._lock:
            sandbox = self._sandboxes.get(sandbox_id)
        if sandbox is None:
            raise ApiError(404, "sandbox not found")
        return sandbox

    def live(self, sandbox_id: str) -> Sandbox:
        """A sandbox that is not destroyed, marked active; 404 otherwise."""
        sandbox = self.get(sandbox_id)
        if sandbox.settle() in ("destroying", "destroyed"):
            raise ApiError(404, "sandbox not found")
        sandbox.last_active = time.monotonic()
        return sandbox

    def running(self, sandbox_id: str) -> Sandbox:
        sandbox = self.live(sandbox_id)
        status = sandbox.settle()
        if status != "running":
            raise ApiError(409, f"sandbox is {status}, not running")
        return sandbox

    def by_ip(self, ip: str) -> Sandbox:
        """The live sandbox whose ``ip`` this is; 404 otherwise."""
        with self._lock:
            every = list(self._sandboxes.values())
        for sandbox in every:
            if sandbox.ip == ip and sandbox.settle() not in ("destroying", "destroyed"):
                return sandbox
        raise ApiError(404, "sandbox not found")

    def page(self, status: str | None, limit: int, offset: int) -> tuple[list[Sandbox], int]:
        with self._lock:
            every = list(self._sandboxes.values())
        chosen = [
            s for s in every if (s.settle() == status if status else s.settle() != "destroyed")
        ]
        return chosen[offset : offset + limit], len(chosen)

    # -- lifecycle ---------------------------------------------------------

    def create(self, spec: SandboxSpec, seed: Path | None = None) -> Sandbox:
        """A new sandbox; ``seed`` is a template whose storage trees it starts with. A name
        that a live sandbox holds is refused (409), as the service refuses it."""
        with self._lock:
            if self._name_taken(spec.name):
                raise ApiError(409, NAME_TAKEN)
        sandbox = self._new(spec)
        sandbox.storage.create()
        if seed is not None:
            sandbox.storage.seed_from(seed)
        self.isolation.prepare(sandbox.storage)
        return self._add(sandbox)

    def started(self, sandbox: Sandbox) -> dict[str, Any]:
        """The answer to a creation, given once the sandbox runs, as the service gives it:
        its ``POST /v1/sandboxes`` returns only once the VM booted and its agent answered
        (the official TypeScript SDK relies on it), so no client polls after a creation.
        A sandbox destroyed or failed meanwhile, or the emulator closing, ends the wait."""
        while sandbox.settle() == "creating" and not self._closed.is_set():
            self._closed.wait(min(0.05, max(sandbox.due - time.monotonic(), 0.001)))
        return sandbox.to_json()

    def fork(self, source_id: str, changes: ForkChanges) -> Sandbox:
        """A copy of a running or paused sandbox's files and layer; the source is untouched."""
        source = self.live(source_id)
        with source.lock:
            status = source.settle()
            if status not in ("running", "paused"):
                raise ApiError(409, f"sandbox is {status}: only running or paused ones fork")
            spec = replace(
                source.spec,
                name=None,  # the service takes no name on a fork
                envs={**source.spec.envs, **changes.envs},
                ingress_enabled=source.spec.ingress_enabled
                if changes.ingress_enabled is None
                else changes.ingress_enabled,
                forked_from=source.id,
            )
            sandbox = self._new(spec)
            sandbox.begin("forking", "paused" if changes.start_paused else "running", self._delay)
            sandbox.egress = list(source.egress if changes.egress is None else changes.egress)
            source.storage.copy_to(sandbox.storage)
        self.isolation.prepare(sandbox.storage)
        return self._add(sandbox)

    def _new(self, spec: SandboxSpec) -> Sandbox:
        sandbox_id = f"sb-{secrets.token_hex(8)}"
        n = next(self._counter)
        sandbox = Sandbox(
            id=sandbox_id,
            spec=spec,
            storage=Storage(self._root / sandbox_id, spec.lowers),
            ip=f"10.88.{n // 250}.{n % 250 + 2}",
            status="creating",
            due=0.0,
            target=None,
            spawn_ms=round(self._delay * 1000),
            egress=list(spec.egress),
            ingress_url_template=self.ingress_base.replace("<sandbox id>", sandbox_id),
        )
        sandbox.begin("creating", "running", self._delay)
        return sandbox

    def _add(self, sandbox: Sandbox) -> Sandbox:
        try:
            sandbox.net = self.networks.create()
            assert sandbox.net.agent is not None
            self._agents.serve(sandbox.id, sandbox.net.agent)
        except BaseException:
            if sandbox.net is not None:
                self._release_net(sandbox)
            self.isolation.release(sandbox.storage)
            sandbox.storage.remove()
            raise
        with self._lock:
            taken = self._name_taken(sandbox.spec.name)
            if not taken:
                self._sandboxes[sandbox.id] = sandbox
        if taken:  # another creation won the name meanwhile
            self._release_net(sandbox)
            self.isolation.release(sandbox.storage)
            sandbox.storage.remove()
            raise ApiError(409, NAME_TAKEN)
        return sandbox

    def _name_taken(self, name: str | None) -> bool:
        """Whether a sandbox not yet destroyed holds ``name`` (a ``destroying`` one still
        does, as on the service); the caller holds ``_lock``."""
        return name is not None and any(
            s.spec.name == name and s.settle() not in ("destroyed", "failed")
            for s in self._sandboxes.values()
        )

    def _release_net(self, sandbox: Sandbox) -> None:
        with sandbox.lock:
            net, sandbox.net = sandbox.net, None
        if net is not None:
            if net.agent is not None:
                self._agents.forget(net.agent)
            net.close()

    def _agent_request(self, sandbox_id: str, action: str) -> None:
        """A sandbox's guest agent asked for its own delete or pause."""
        with contextlib.suppress(ApiError):  # already gone, or not running: nothing to do
            if action == "delete":
                self.destroy(sandbox_id)
            else:
                self.pause(sandbox_id)

    def pause(self, sandbox_id: str) -> Sandbox:
        sandbox = self.live(sandbox_id)
        with sandbox.lock:
            status = sandbox.settle()
            if status != "running":
                raise ApiError(409, f"sandbox is {status}, not running")
            for process in sandbox.processes.values():
                process.freeze()
            sandbox.begin("pausing", "paused", self._delay)
        return sandbox

    def resume(self, sandbox_id: str) -> Sandbox:
        sandbox = self.live(sandbox_id)
        with sandbox.lock:
            status = sandbox.settle()
            if status not in ("paused", "error"):
                raise ApiError(409, f"sandbox is {status}, not paused")
            for process in sandbox.processes.values():
                process.thaw()
            sandbox.begin("resuming", "running", self._delay)
        return sandbox

    def configure(self, sandbox_id: str, **changes: Any) -> Sandbox:
        """Change settings of a live sandbox (``ingress_enabled``, ``auto_pause_after_seconds``)."""
        sandbox = self.live(sandbox_id)
        with sandbox.lock:
            sandbox.spec = replace(sandbox.spec, **changes)
        return sandbox

    def destroy(self, sandbox_id: str) -> Sandbox:
        sandbox = self.live(sandbox_id)
        with sandbox.lock:
            sandbox.begin("destroying", "destroyed", self._delay)
            processes = list(sandbox.processes.values())
        for process in processes:
            process.stop()
        for forget in self.on_destroy:
            forget(sandbox)
        self._release_net(sandbox)
        self.isolation.release(sandbox.storage)
        sandbox.storage.remove()
        with sandbox.lock:  # "destroyed" only a transition delay after the teardown ended
            sandbox.due = time.monotonic() + self._delay
        return sandbox

    def fail(self, sandbox_id: str, status: str) -> Sandbox:
        """The sandbox breaks down (``failed`` or ``error``): its processes die with it,
        and their output streams end without an exit frame, as a dead VM's would."""
        sandbox = self.live(sandbox_id)
        with sandbox.lock:
            sandbox.status, sandbox.target = status, None
            processes = list(sandbox.processes.values())
        for process in processes:
            process.abort()
        return sandbox

    # -- processes ---------------------------------------------------------

    def new_process(
        self, kind: str, command: Command, *, size: tuple[int, int] | None = None
    ) -> ManagedProcess:
        """A process record, not yet started (so a reader can attach first)."""
        process_id = f"proc-{secrets.token_hex(8)}"
        return ManagedProcess(
            process_id, kind, command, self._journal_bytes, self._frame_bytes, size=size
        )

    def spawn(self, sandbox_id: str, process: ManagedProcess) -> None:
        """Start ``process`` in a running sandbox and register it."""
        sandbox = self.running(sandbox_id)
        self.isolation.prepare(sandbox.storage, wait=True)  # here, never in the spawner
        with sandbox.lock:
            if sandbox.settle() != "running":
                if sandbox.settle() in ("destroying", "destroyed"):
                    self.isolation.release(sandbox.storage)  # mounted again meanwhile:
                    sandbox.storage.remove()  # and its layer's folders made again
                raise ApiError(409, "sandbox is no longer running")
            sandbox.processes[process.id] = process
            self._spawner.submit(self._start, sandbox, process).result()

    def _start(self, sandbox: Sandbox, process: ManagedProcess) -> None:
        """On the spawner thread: start the process inside the sandbox's network."""
        net = sandbox.net
        if net is None:  # released meanwhile: the sandbox is being destroyed
            raise ApiError(409, "sandbox is no longer running")
        self._start_in(net, sandbox.storage, process)

    def _start_in(self, net: Network, storage: Storage, process: ManagedProcess) -> None:
        """On the spawner thread: every launch (plain, bubblewrap, terminal, build step)
        starts here, inside its network namespace; bubblewrap's mount namespace
        (``_layers``, entered with ``nsenter --mount``) keeps the network it inherits."""
        with net.entered():
            process.start(self.isolation, storage)

    def start_unlisted(self, storage: Storage, process: ManagedProcess, net: Network) -> None:
        """Start a process of no listed sandbox (a template build's step) in ``storage``,
        inside ``net`` (the build's own: ``Networks.create(agent=False)``)."""
        self.isolation.prepare(storage, wait=True)
        self._spawner.submit(self._start_in, net, storage, process).result()

    def process(self, sandbox_id: str, process_id: str) -> ManagedProcess:
        """A managed process or terminal (not an exec) of a live sandbox; 404 otherwise."""
        process = self.live(sandbox_id).processes.get(process_id)
        if process is None or process.kind not in ("process", "pty"):
            raise ApiError(404, "process not found")
        return process

    def end_exec(self, sandbox_id: str, process: ManagedProcess, *, answered: bool) -> None:
        """An exec is over. Answered (its command ended): what it left running in the
        background lives on, as on the service, kept in the sandbox's records (unlisted)
        so that a pause freezes it and a destroy or close kills it. Its client gone
        before the end: the whole tree ends (exec is not reconnectable). A record whose
        tree has ended is forgotten, and so are earlier execs' that have ended since."""
        if not answered:
            process.stop()
        with self._lock:
            sandbox = self._sandboxes.get(sandbox_id)
        if sandbox is None:
            return
        with sandbox.lock:
            execs = [p for p in sandbox.processes.values() if p.kind == "exec"]
        for ended in (p for p in execs if p.done and p.tree_exited()):
            ended.stop()  # releases its pumps and pipes
            with sandbox.lock:
                sandbox.processes.pop(ended.id, None)

    # -- emulator-wide -----------------------------------------------------

    def live_ids(self) -> list[str]:
        with self._lock:
            every = list(self._sandboxes.values())
        return [s.id for s in every if s.settle() not in ("destroying", "destroyed")]

    def uses_layer(self, layer: Path) -> bool:
        """Whether a sandbox that is not destroyed lies on ``layer`` (a template's)."""
        with self._lock:
            every = list(self._sandboxes.values())
        return any(layer in s.storage.lowers for s in every if s.settle() != "destroyed")

    def live_processes(self) -> list[LiveProcess]:
        with self._lock:
            every = list(self._sandboxes.values())
        found = []
        for sandbox in every:
            with sandbox.lock:
                processes = list(sandbox.processes.values())
            for process in processes:
                pids = process.tree_pids()
                if pids:
                    found.append(LiveProcess(sandbox.id, process.id, tuple(pids)))
        return found

    def close(self) -> None:
        """Kill every process of every sandbox; storage is left to the caller."""
        self._closed.set()
        with self._lock:
            every = list(self._sandboxes.values())
        for sandbox in every:
            with sandbox.lock:
                processes = list(sandbox.processes.values())
            for process in processes:
                process.stop()
            self._release_net(sandbox)
        self._spawner.shutdown()
        for close in self.on_close:
            close()
        self._agents.close()
        self.networks.close()
        self.isolation.close()

    def _tick(self) -> None:
        while not self._closed.wait(TICK):
            now = time.monotonic()
            with self._lock:
                every = list(self._sandboxes.values())
            for sandbox in every:
                limit = sandbox.spec.auto_pause_after_seconds
                if (
                    limit is not None
                    and sandbox.settle() == "running"
                    and sandbox.idle_for(now) >= limit
                ):
                    with contextlib.suppress(ApiError):  # it changed state meanwhile
                        self.pause(sandbox.id)
