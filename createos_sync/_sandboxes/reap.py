"""Reaping: destroy the sandboxes whose leases died without closing them.

A lease records every sandbox it creates in the local lease journal (see
``createos_sync._sandboxes.journal``) and removes the entry once the sandbox is
destroyed or deliberately kept. An entry whose owning process is gone (a
script killed with SIGKILL, a crashed kernel, a lost creation reply) names a
sandbox that may still be running and billed: ``reap()`` destroys it, then
forgets the entry. Entries of other hosts and of other base URLs are left
alone, and so are those of live processes unless asked (``all=True``, the
CLI's ``--all``, confirming each owner's pid).

Nothing is dropped that a human may need: an entry that cannot be read, and
a damaged journal set aside (see ``createos_sync._sandboxes.journal``), are reported
one line each and kept, while the readable entries beside them are reaped.

An entry of a dead owner whose base URL is a loopback address where nothing
listens any more names a sandbox of a local emulator that has ended, and an
emulator's sandboxes end with it: the entry is forgotten (and the outcome
says so). Finding that out costs one TCP connection attempt, no request.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, Protocol
from urllib.parse import urlsplit

import attrs

from .._resources import networks as _networks
from .._wire.deadline import Deadline
from ..config import is_loopback, service_key
from ..errors import CreateosError
from . import background as _background
from . import claims as _claims
from .fork import candidates, read_marker
from .journal import Entry, Journal, Unreadable

if TYPE_CHECKING:
    from .._wire.http import Transport
    from ..config import Config
    from ..models import SandboxInfo

Action = Literal[
    "destroyed", "would destroy", "forgotten", "would forget", "skipped", "failed", "unreadable"
]
Confirm = Callable[[Entry], bool]
PROBE_TIMEOUT = 1.0  # seconds for a connection to a loopback port: refused at once if closed
AUTO_ENV = "CREATEOS_SYNC_AUTO_REAP"  # "off": opening a lease reaps nothing

log = logging.getLogger("createos_sync.reap")


class Account(Protocol):
    """What ``reap`` needs of a client: ``createos_sync.Client`` is one (reaping sits
    below the public surface, which calls it), the CLI's key-less dry run another."""

    @property
    def config(self) -> Config: ...
    @property
    def _transport(self) -> Transport: ...  # the package's own (Client's is private)
    @property
    def sleep(self) -> Callable[[float], None]: ...
    def sandboxes(self) -> list[SandboxInfo]: ...
    def destroy(self, sandbox_id: str) -> bool: ...


_swept: set[str] = set()  # the services this process has swept (once each)
_swept_lock = threading.Lock()


@attrs.frozen
class Reaped:
    """What ``reap`` did (or, in a dry run, would do) about one journal entry."""

    name: str
    action: Action
    reason: str
    sandbox_ids: tuple[str, ...] = ()

    @property
    def needs_attention(self) -> bool:
        """True when a human must act: a destroy failed, or an entry could not be read."""
        return self.action in ("failed", "unreadable")

    def describe(self) -> str:
        """One human-readable line."""
        if self.action == "unreadable":
            return f"unreadable {self.name}: {self.reason}"
        what = ", ".join(self.sandbox_ids) or f"(no sandbox) {self.name}"
        return f"{self.action} {what}: {self.reason}"


def reap(
    client: Account,
    *,
    dry_run: bool = False,
    all: bool = False,  # named after the CLI's --all
    confirm: Confirm | None = None,
    journal: Journal | None = None,
) -> list[Reaped]:
    """Destroy the journaled sandboxes of ``client``'s base URL whose owning process is gone.

    An entry without a sandbox id (the process died while the creation was
    in flight) is resolved by its unique name; a fork's (the service takes
    no name on a fork) by the rule of ``_fork``: the fork of its source that
    carries the entry's name in its env (a fork whose marker cannot be read,
    a paused one, is never destroyed: the entry is reported as failed and
    kept). Resolved entries are removed from the journal; an entry whose
    sandbox could not be destroyed is kept,
    so that a later reap tries again. Nothing is changed when ``dry_run``.

    ``all=True`` also destroys the sandboxes of owners that still run on
    this host (a notebook kernel that lost track of its lease; this very
    process's open leases included), each only if ``confirm(entry)`` says
    yes when ``confirm`` is given (the CLI asks for the owner's pid).

    A sandbox that a live lease attached to (``sandbox_id=``: a kernel that
    reattached after a crash) is left, and the outcome names that lease's
    process, even if the entry's owner died; ``all=True`` takes it too,
    each attached process confirmed as an owner is. Each destroy is decided
    under the journal's lock (``_sandboxes.claims``): an attach that claimed
    the sandbox after this reap read the journal still wins, and an attach
    arriving while the destroy is under way is refused.

    An entry that cannot be read, and a damaged journal file set aside, are
    reported as ``"unreadable"`` (with the sandbox of that name, if one
    exists) and kept for a human; every other entry is still reaped.

    The private networks a lease made (``box.create_network``) are journaled
    with its sandbox: once the sandbox is destroyed, they are deleted too (a
    failure keeps the entry, for the next reap).

    Request budget: one listing (only if an entry lacks its sandbox id, shared
    by all of them) plus one destroy per sandbox found, and one delete per
    network the lease made (plus one per "in use" answer, for up to 30 s);
    for a fork's entry, 1 marker read per unclaimed fork of its source (each
    read once).
    """
    journal = journal if journal is not None else Journal()
    return _reap(client, journal, dry_run=dry_run, everything=all, confirm=confirm, spare=None)


def _reap(
    client: Account,
    journal: Journal,
    *,
    dry_run: bool,
    everything: bool,
    confirm: Confirm | None,
    spare: str | None,
) -> list[Reaped]:
    """``reap``; ``spare``: a sandbox the caller named (the sweep's lease attached to it)."""
    base_url = client.config.base_url
    survey = journal.survey()
    holders = _claims.attached(journal, base_url)
    by_name = _NameLookup(client, {e.sandbox_id for e in survey.entries if e.sandbox_id})
    outcomes = []
    for entry in survey.entries:
        gone = _emulator_gone(entry)
        if gone is not None:
            action: Action = "would forget" if dry_run else "forgotten"
            outcomes.append(Reaped(entry.name, action, gone, _ids(entry)))
            if not dry_run:
                journal.remove(entry.name)
            continue
        skip = _reason_to_skip(entry, base_url, everything, confirm, holders, spare)
        if skip is not None:
            outcomes.append(Reaped(entry.name, "skipped", skip, _ids(entry)))
            continue
        outcome = _reap_entry(client, entry, by_name, journal, dry_run=dry_run, held_ok=everything)
        if outcome.action == "forgotten":
            journal.remove(entry.name)
        outcomes.append(outcome)
    outcomes += [_unreadable(bad, by_name) for bad in survey.unreadable]
    return outcomes


def sweep_in_background(client: Account, journal: Journal, *, spare: str | None = None) -> None:
    """Once per process and service, when a lease opens: ``reap`` in the background.

    A crashed script's sandboxes (its owner is dead: SIGKILL, a crash, a
    creation cut before its ttl watchdog was armed) are gone by the next run,
    no command needed; live owners' and other hosts' entries are never
    touched, nor ``spare`` (the sandbox the opening lease attached to), nor a
    sandbox a live lease of any process of this machine is attached to (see
    ``_sandboxes.claims``: an attach claims before any sweep can act, and the
    sweep re-checks each entry under the journal's lock before it destroys).
    Each outcome is logged at INFO (what it left too; a failure at WARNING). Costs
    nothing when nothing is left; else what ``reap`` costs, paced with every
    other request. ``CREATEOS_SYNC_AUTO_REAP=off`` turns it off.
    """
    if os.environ.get(AUTO_ENV, "").strip().lower() in ("off", "0", "false", "no"):
        return
    key = service_key(client.config.base_url)
    with _swept_lock:
        if key in _swept:
            return
        _swept.add(key)
    _background.scheduler().call_later(
        0.0,
        lambda: _sweep(client, journal, spare),
        name="reap of dead owners' sandboxes",
        own_thread=True,
    )


def _sweep(client: Account, journal: Journal, spare: str | None) -> None:
    try:
        outcomes = _reap(
            client, journal, dry_run=False, everything=False, confirm=None, spare=spare
        )
    except Exception as exc:  # the client closed meanwhile, say: the entries stay for later
        log.warning("reaping the sandboxes of dead leases failed (%s): %s", type(exc).__name__, exc)
        return
    for outcome in outcomes:
        if outcome.action in ("destroyed", "forgotten"):
            log.info("reaped a dead lease's entry: %s", outcome.describe())
        elif outcome.action == "failed":
            log.warning("could not reap a dead lease's entry: %s", outcome.describe())
        elif outcome.action == "skipped":
            what = ", ".join(outcome.sandbox_ids) or f"(no sandbox) {outcome.name}"
            log.info("the auto-reap left %s: %s", what, outcome.reason)


def _reason_to_skip(
    entry: Entry,
    base_url: str,
    everything: bool,
    confirm: Confirm | None,
    holders: dict[str, tuple[int, ...]],
    spare: str | None,
) -> str | None:
    if service_key(entry.base_url) != service_key(base_url):
        return f"recorded for {entry.base_url} (reap there with CREATEOS_API_URL={entry.base_url})"
    if spare is not None and entry.sandbox_id == spare:
        return "the lease that started this sweep attached to it"
    alive = entry.owner_alive()
    if alive is None:
        return f"its lease belongs to a process on host {entry.host}"
    attached = holders.get(entry.sandbox_id or "", ())
    if not alive and attached:
        return _held_by_attached(entry, attached, everything, confirm)
    if not alive:
        return None
    if not everything:
        return f"its lease is still held by process {entry.pid} (`reap --all` takes it anyway)"
    if confirm is not None and not confirm(entry):
        return f"its lease is still held by process {entry.pid}, and that was not confirmed"
    return None


def _held_by_attached(
    entry: Entry, pids: tuple[int, ...], everything: bool, confirm: Confirm | None
) -> str | None:
    """The owner died, but live leases attached to its sandbox: left unless confirmed."""
    held = f"a live lease of process {', '.join(map(str, pids))} is attached to it"
    if not everything:
        return f"{held} (`reap --all` takes it anyway)"
    if confirm is not None and not all(confirm(attrs.evolve(entry, pid=pid)) for pid in pids):
        return f"{held}, and that was not confirmed"
    return None


def _emulator_gone(entry: Entry) -> str | None:
    """Why ``entry`` can be forgotten: its owner died, and so did the loopback emulator
    that served its sandbox (nothing accepts a connection on that port); else None."""
    parts = urlsplit(entry.base_url)
    host = parts.hostname or ""
    if not is_loopback(host):
        return None
    if entry.owner_alive() is not False:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT).close()
    except ConnectionRefusedError:
        return (
            f"the emulator at {entry.base_url} no longer answers, and its sandboxes "
            f"ended with it (its owner, process {entry.pid}, is gone)"
        )
    except OSError:  # no clear answer: leave the entry to the usual rules
        return None
    return None


def _reap_entry(
    client: Account,
    entry: Entry,
    by_name: _NameLookup,
    journal: Journal,
    *,
    dry_run: bool,
    held_ok: bool,
) -> Reaped:
    alive = entry.owner_alive()
    why = (
        f"taken from its owner, process {entry.pid}, which still runs"
        if alive
        else f"its owner (process {entry.pid}) is gone"
    )
    if entry.sandbox_id is not None:
        sandbox_ids: tuple[str, ...] = (entry.sandbox_id,)
    else:
        try:
            sandbox_ids, unread = by_name.forks(entry) if entry.fork_from else (
                by_name(entry.name), ()
            )  # fmt: skip
        except CreateosError as exc:
            return Reaped(entry.name, "failed", f"{why}; looking it up failed: {exc}")
        if not sandbox_ids and unread:
            found = ", ".join(unread)
            return Reaped(
                entry.name,
                "failed",
                f"{why}; its fork may be one of {found}, whose marker could not be read "
                "(paused?): check with `createos-sync ls`, then destroy it by id",
            )
        if not sandbox_ids:
            missing = "no fork of its source carries its marker" if entry.fork_from else (
                "no sandbox of its name exists"
            )  # fmt: skip
            return Reaped(
                entry.name,
                "would forget" if dry_run else "forgotten",
                f"{why}; {missing}",
            )
    if dry_run:
        return Reaped(entry.name, "would destroy", why, sandbox_ids)
    try:  # under the journal's lock: an attach that claimed it meanwhile wins
        token = _claims.begin_reap(journal, entry, sandbox_ids, held_ok=held_ok)
    except _claims.Held as held:
        return Reaped(entry.name, "skipped", str(held), sandbox_ids)
    except OSError as exc:
        return Reaped(
            entry.name, "failed", f"{why}; the lease journal could not be updated ({exc})"
        )
    failures: list[str] = []
    try:
        for sandbox_id in sandbox_ids:
            try:
                client.destroy(sandbox_id)
            except CreateosError as exc:
                failures.append(f"{sandbox_id}: {exc}")
        if not failures:  # its members gone: the networks the lease made
            failures += _delete_networks(client, entry)
    finally:
        _end_reap(journal, entry, token, destroyed=not failures)
    if not failures and entry.networks:
        why += f"; network {', '.join(entry.networks)} deleted"
    if failures:
        return Reaped(
            entry.name, "failed", f"{why}; destroying failed ({'; '.join(failures)})", sandbox_ids
        )
    return Reaped(entry.name, "destroyed", why, sandbox_ids)


def _delete_networks(client: Account, entry: Entry) -> list[str]:
    """Delete the networks the entry's lease made (1 request each, plus 1 per "in use"
    answer); what could not be, in words. One the service does not know is gone."""
    failures = []
    for network_id in entry.networks:
        deadline = Deadline.after(client._transport.config.cleanup_timeout)
        try:
            _networks.delete(client._transport, network_id, deadline, client.sleep)
        except CreateosError as exc:
            failures.append(f"network {network_id}: {exc}")
    return failures


def _end_reap(journal: Journal, entry: Entry, token: str, *, destroyed: bool) -> None:
    """Drop the marks (and the entry, once destroyed); a failure leaves them for later:
    marks of a process that ended hold nothing, and a later reap forgets the entry."""
    try:
        _claims.end_reap(journal, entry, token, destroyed=destroyed)
    except OSError as exc:
        log.warning("the lease journal at %s could not be updated: %s", journal.path, exc)


def _unreadable(bad: Unreadable, by_name: _NameLookup) -> Reaped:
    """Report an entry or file that cannot be read, with the sandbox its name still finds."""
    found: tuple[str, ...] = (bad.sandbox_id,) if bad.sandbox_id else ()
    if not found and bad.name is not None:
        try:
            found = by_name(bad.name)
        except CreateosError:
            found = ()  # the line stands without it: a human checks either way
    about = f"lease {bad.name}: " if bad.name else ""
    live = f"; sandbox {', '.join(found)} may belong to it" if found else ""
    return Reaped(bad.source.name, "unreadable", f"{about}{bad.reason}{live}", found)


def _ids(entry: Entry) -> tuple[str, ...]:
    return (entry.sandbox_id,) if entry.sandbox_id is not None else ()


class _NameLookup:
    """Sandbox ids by name (or, for a fork, by marker), from one listing made on first use."""

    def __init__(self, client: Account, claimed: set[str]) -> None:
        self._client = client
        self._sandboxes: list[SandboxInfo] | None = None
        self._by_name: dict[str, list[str]] | None = None
        self._claimed = claimed  # the journal's sandbox ids: no lost fork is one of them
        self._markers: dict[str, str | None] = {}  # each fork's marker, read once

    def _listing(self) -> list[SandboxInfo]:
        if self._sandboxes is None:
            self._sandboxes = self._client.sandboxes()
        return self._sandboxes

    def __call__(self, name: str) -> tuple[str, ...]:
        if self._by_name is None:
            self._by_name = {}
            for sandbox in self._listing():
                if sandbox.name is not None and sandbox.status != "destroyed":
                    self._by_name.setdefault(sandbox.name, []).append(sandbox.id)
        return tuple(self._by_name.get(name, ()))

    def forks(self, entry: Entry) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The fork carrying ``entry``'s marker, and the forks whose marker could not be read."""
        assert entry.fork_from is not None
        transport = self._client._transport
        ours, unread = [], []
        for fork in candidates(self._listing(), entry.fork_from, self._claimed):
            if fork.id not in self._markers:
                deadline = Deadline.after(transport.config.timeout)
                self._markers[fork.id] = read_marker(transport, fork, deadline, self._client.sleep)
            marker = self._markers[fork.id]
            if marker == entry.name:
                ours.append(fork.id)
            elif marker is None:
                unread.append(fork.id)
        return tuple(ours), tuple(unread)
