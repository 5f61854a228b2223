"""How ``open()`` makes its sandbox: a creation or a fork, journaled, a lost answer recovered.

The engines: ``_sandbox.created`` sends the request, checks the id and, on
an unknown outcome, finds and destroys what the request may have made (a
creation by its unique name; a fork, which takes no name, by the marker in
its env: ``_sandboxes.fork.LostFork``). Here: the journal entry first, then the request, then
the wait until the sandbox runs (or, for ``start_paused``, is paused).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._resources import disks as _disks
from .._resources import networks as _networks
from .._sandboxes import claims as _claims
from .._sandboxes import fork as _fork
from .._sandboxes import sandbox as _sandbox
from .._sandboxes import shield as _shield
from .._sandboxes.attachments import Attachments
from .._sandboxes.journal import Entry, Journal
from .._wire import api as _api
from .._wire.deadline import Deadline
from .._wire.server_text import ID, token
from ..errors import ConfigError, CreateosApiError, CreateosError, Operation, SandboxUnavailable
from ..models import SandboxInfo
from ._options import LeaseOptions

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
        self.attached: _claims.Attached | None = None  # an attach's claim (``claim``)
        self.networks: set[str] = set()  # made by the lease, not yet deleted
        self.sandbox_gone = False

    def claim(self, sandbox_id: str, base_url: str) -> None:
        """An attach: claim the sandbox before any request, so no sweep destroys it
        (``_sandboxes.claims``). A journal that cannot be written is a warning: no
        sweep can mark (and so destroy) anything in it either.

        Raises:
            SandboxUnavailable: a reap is destroying it.
        """
        if self.journal is None:
            return
        try:
            with _shield.delivered():  # nothing exists yet: an interrupt here loses nothing
                self.attached = _claims.claim(self.journal, sandbox_id, base_url)
        except _claims.Held as held:
            raise SandboxUnavailable(
                sandbox_id,
                str(held),
                "the lease that made it died, and a reap took it before this attach",
            ) from None
        except OSError as exc:
            log.warning("the lease journal at %s could not be updated: %s", self.journal.path, exc)
            return
        if self.attached.taken:
            log.info(
                "sandbox %s: its journal entry passed to this process (its owner died)", sandbox_id
            )
        if self.attached.holders:
            pids = ", ".join(map(str, self.attached.holders))
            log.info("sandbox %s is shared with the live lease of process %s", sandbox_id, pids)

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

    def network_made(self, network_id: str) -> None:
        """A network the lease made: journaled with its sandbox, for ``reap`` to delete."""
        if self.journal is not None and self.name is not None:
            self.networks.add(network_id)
            self.journal.add_network(self.name, network_id)

    def network_deleted(self, network_id: str) -> None:
        """Deleted at close: forgotten; the entry with it, once the sandbox is gone too."""
        self.networks.discard(network_id)
        if self.journal is not None and self.name is not None:
            if self.sandbox_gone and not self.networks:
                self.journal.remove(self.name)
                self.name = None
            else:
                self.journal.drop_network(self.name, network_id)

    def forget(self, *, gone: bool = True, kept: bool = False) -> None:
        """The sandbox is destroyed (``gone``) or left: its entry (and claim) go.

        An entry with networks still to delete stays until they are
        (``network_deleted``): a crash meanwhile leaves them to ``reap``. An
        attach's claim is dropped; the entries naming its sandbox go with the
        sandbox, or when it is ``kept`` as asked (``on_exit`` given); left by
        an attach's default, they stay this process's (``claims.release``).
        """
        self.sandbox_gone = gone
        if self.journal is not None and self.name is not None and not (gone and self.networks):
            self.journal.remove(self.name)
            self.name = None
        attached, self.attached = self.attached, None
        if self.journal is not None and attached is not None:
            try:
                _claims.release(self.journal, attached, gone=gone or kept)
            except OSError as exc:  # a claim of an ended process holds nothing
                log.warning(
                    "the lease journal at %s could not be updated: %s", self.journal.path, exc
                )


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
    transport = client._transport
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
    try:
        return _make(
            client,
            options,
            record,
            deadline,
            body,
            lambda body, until: _api.create_sandbox(transport, body, until),
            Operation.SANDBOX_CREATION,
        )
    except CreateosApiError as exc:
        unknown = _unknown_rootfs(client, options.rootfs, exc, deadline)
        if unknown is None:
            raise
        raise CreateosApiError(
            Operation.SANDBOX_CREATION, 400, request_id=exc.request_id, detail=unknown
        ) from None


def _unknown_rootfs(
    client: Client, rootfs: str | None, exc: CreateosApiError, deadline: Deadline
) -> str | None:
    """For a creation refused (400) with a ``rootfs`` the catalog does not list: what to say,
    with the names it lists (1 catalog request, on that failure only)."""
    if exc.status != 400 or rootfs is None:
        return None
    try:
        names = _api.list_rootfs(client._transport, deadline)
    except CreateosError:  # the catalog cannot help: the service's own refusal stands
        return None
    if rootfs in names:
        return None
    shown = [name for name in names if token(name, ID) == name][:40]
    import difflib  # only for this rare failure: not imported with the package

    close = difflib.get_close_matches(rootfs, shown, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    listed = ", ".join(shown) if shown else "(none listed)"
    return (
        f"unknown rootfs {rootfs!r}{hint}: the root file systems are {listed} "
        "(or give a ready template's id)"
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
    answer is recovered (``_sandboxes.fork.LostFork``). From the moment its id is
    known, the sandbox is ``record.made_id``, which a failed ``open()``
    destroys.
    """
    transport = client._transport
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
