"""How ``open()`` makes its sandbox: a creation or a fork, journaled, a lost answer recovered.

The engines: ``_sandbox.created`` sends the request, checks the id and, on
an unknown outcome, finds and destroys what the request may have made (a
creation by its unique name; a fork, which takes no name, by the marker in
its env: ``_fork.LostFork``). Here: the journal entry first, then the request, then
the wait until the sandbox runs (or, for ``start_paused``, is paused).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._resources import disks as _disks
from .._resources import networks as _networks
from .._sandboxes import fork as _fork
from .._sandboxes import sandbox as _sandbox
from .._sandboxes import shield as _shield
from .._sandboxes.attachments import Attachments
from .._sandboxes.journal import Entry, Journal
from .._sandboxes.options import LeaseOptions
from .._wire import api as _api
from .._wire.deadline import Deadline
from ..errors import ConfigError, Operation
from ..models import SandboxInfo

if TYPE_CHECKING:
    from ..client import Client

log = logging.getLogger("createos_sync.lease")

# Sends a request that makes a sandbox (a creation, a fork) from its body; returns the answer.
Send = Callable[[dict[str, Any], Deadline], dict[str, Any]]


class Record:
    """The journal entry of the sandbox a lease makes, and that sandbox's id once known.

    ``made_id`` is what a failed ``open()`` destroys; ``forget()`` removes
    the entry once the sandbox is gone or deliberately kept.
    """

    def __init__(self, journal: Journal | None) -> None:
        self.journal = journal  # None: journal=False (or CREATEOS_SYNC_JOURNAL=off)
        self.name: str | None = None
        self.made_id: str | None = None

    def add(self, entry: Entry) -> None:
        if self.journal is None:
            return
        self.name = entry.name  # first: removing an entry never written is harmless
        try:
            with _shield.delivered():  # nothing exists yet: an interrupt here loses nothing
                self.journal.add(entry)
        except ConfigError:
            self.name = None  # the journal cannot be written: nothing to forget
            raise

    def made(self, sandbox_id: str) -> None:
        self.made_id = sandbox_id
        if self.journal is not None and self.name is not None:
            self.journal.set_sandbox(self.name, sandbox_id)

    def forget(self) -> None:
        if self.journal is not None and self.name is not None:
            self.journal.remove(self.name)
            self.name = None


def make(
    client: Client,
    options: LeaseOptions,
    record: Record,
    deadline: Deadline,
    attached: Attachments | None = None,
) -> SandboxInfo:
    """Create (or fork) the sandbox ``options`` ask for; runs held (see ``Lease.open``).

    Disks and networks are attached by the creation itself (a disk given by name
    is looked up first: 1 request each) and recorded in ``attached``, which
    ``close()`` detaches before it destroys.
    """
    transport = client.transport
    source = options.fork_from
    if source is not None:
        return _make(
            client,
            options,
            record,
            deadline,
            options.fork_body(),
            lambda body, until: _api.fork_sandbox(transport, source, body, until),
            Operation.SANDBOX_FORK,
            fork_of=source,
        )
    body = options.creation_body()
    attached = attached if attached is not None else Attachments()
    if options.disks:
        ids = [(_disks.resolve_id(transport, d, deadline), p) for p, d in options.disks]
        body["disks"] = [{"disk_id": disk_id, "mount_path": path} for disk_id, path in ids]
        for disk_id, path in ids:
            attached.add_disk(disk_id, path)
    if options.networks:
        networks = [_networks.network_id(n) for n in options.networks]
        body["networks"] = [{"id": network_id} for network_id in networks]
        for network_id in networks:
            attached.add_network(network_id)
    return _make(
        client,
        options,
        record,
        deadline,
        body,
        lambda body, until: _api.create_sandbox(transport, body, until),
        Operation.SANDBOX_CREATION,
    )


def _make(
    client: Client,
    options: LeaseOptions,
    record: Record,
    deadline: Deadline,
    body: dict[str, Any],
    send: Send,
    operation: str,
    *,
    fork_of: str | None = None,
) -> SandboxInfo:
    """Make a sandbox (``send`` a creation, or a fork of ``fork_of``), journaled.

    A creation carries a unique name, by which a lost answer is recovered; a
    fork takes no name, so it carries the name in its env, by which a lost
    answer is recovered (``_fork.LostFork``). From the moment its id is
    known, the sandbox is ``record.made_id``, which a failed ``open()``
    destroys.
    """
    transport = client.transport
    name = f"{options.name or 'createos-sync'}-{secrets.token_hex(4)}"  # <= 22 characters
    recovery = None
    if fork_of is None:
        body = {**body, "name": name}
    else:  # the service takes no name on a fork: its env carries the name instead
        body = _fork.marked(body, name)
        recovery = _fork.LostFork(transport, fork_of, name, record.journal, deadline)
    record.add(Entry(name=name, base_url=transport.config.base_url, fork_from=fork_of))
    info = _sandbox.created(
        transport,
        name,
        lambda: send(body, deadline),
        operation=operation,
        cleanup_deadline=Deadline.after(transport.config.cleanup_timeout),
        sleep=client.sleep,
        recovery=recovery,
        runs_when_answered=fork_of is None,
    )
    record.made(info.id)
    log.info("created sandbox %s (%s)", info.id, name)
    with _shield.delivered():
        if options.start_paused:
            return _fork.settle_paused(transport, info, deadline, client.sleep)
        return _sandbox.ensure_running(transport, info.id, deadline, client.sleep, info)
