"""Reaping: destroy the sandboxes whose leases died without closing them.

A lease records every sandbox it creates in the local lease journal (see
``createos_sync._journal``) and removes the entry once the sandbox is
destroyed or deliberately kept. An entry whose owning process is gone (a
script killed with SIGKILL, a crashed kernel, a lost creation reply) names a
sandbox that may still be running and billed: ``reap()`` destroys it, then
forgets the entry. Entries of live processes, of other hosts and of other
base URLs are left alone.

Request budget: one listing (only if an entry lacks its sandbox id, shared
by all such entries) plus one destroy per sandbox found.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import attrs

from ._fork import CLOCK_MARGIN, unclaimed_forks
from ._journal import Entry, Journal
from .errors import CreateosError

if TYPE_CHECKING:
    from .client import Client
    from .models import SandboxInfo

Action = Literal["destroyed", "would destroy", "forgotten", "would forget", "skipped", "failed"]


@attrs.frozen
class Reaped:
    """What ``reap`` did (or, in a dry run, would do) about one journal entry."""

    name: str
    action: Action
    reason: str
    sandbox_ids: tuple[str, ...] = ()

    def describe(self) -> str:
        """One human-readable line."""
        what = ", ".join(self.sandbox_ids) or f"(no sandbox) {self.name}"
        return f"{self.action} {what}: {self.reason}"


def reap(client: Client, *, dry_run: bool = False, journal: Journal | None = None) -> list[Reaped]:
    """Destroy the journaled sandboxes of ``client``'s base URL whose owning process is gone.

    An entry without a sandbox id (the process died while the creation was
    in flight) is resolved by its unique name; a fork's (the service takes
    no name on a fork) by the rule of ``_fork``: the one fork of its source
    made since the entry that no journal entry claims (several: none is
    destroyed, and the entry is reported as failed). Resolved entries are removed
    from the journal; an entry whose sandbox could not be destroyed is kept,
    so that a later reap tries again. Nothing is changed when ``dry_run``.
    """
    journal = journal if journal is not None else Journal()
    base_url = client.config.base_url
    entries = journal.entries()
    by_name = _NameLookup(client, {e.sandbox_id for e in entries if e.sandbox_id is not None})
    outcomes = []
    for entry in entries:
        skip = _reason_to_skip(entry, base_url)
        if skip is not None:
            outcomes.append(Reaped(entry.name, "skipped", skip, _ids(entry)))
            continue
        outcome = _reap_entry(client, entry, by_name, dry_run=dry_run)
        if outcome.action in ("destroyed", "forgotten"):
            journal.remove(entry.name)
        outcomes.append(outcome)
    return outcomes


def _reason_to_skip(entry: Entry, base_url: str) -> str | None:
    if entry.base_url != base_url:
        return f"recorded for {entry.base_url} (reap there with CREATEOS_API_URL={entry.base_url})"
    alive = entry.owner_alive()
    if alive is None:
        return f"its lease belongs to a process on host {entry.host}"
    if alive:
        return f"its lease is still held by process {entry.pid}"
    return None


def _reap_entry(client: Client, entry: Entry, by_name: _NameLookup, *, dry_run: bool) -> Reaped:
    dead = f"its owner (process {entry.pid}) is gone"
    if entry.sandbox_id is not None:
        sandbox_ids: tuple[str, ...] = (entry.sandbox_id,)
    else:
        try:
            sandbox_ids = by_name.forks(entry) if entry.fork_from else by_name(entry.name)
        except CreateosError as exc:
            return Reaped(entry.name, "failed", f"{dead}; looking it up failed: {exc}")
        if len(sandbox_ids) > 1 and entry.fork_from:
            found = ", ".join(sandbox_ids)
            why = f"{dead}; its fork is one of {found}: destroy it with `createos-sync destroy ID`"
            return Reaped(entry.name, "failed", why)
        if not sandbox_ids:
            return Reaped(
                entry.name,
                "would forget" if dry_run else "forgotten",
                f"{dead} while creating it, and no sandbox of that name exists",
            )
    if dry_run:
        return Reaped(entry.name, "would destroy", dead, sandbox_ids)
    failures = []
    for sandbox_id in sandbox_ids:
        try:
            client.destroy(sandbox_id)
        except CreateosError as exc:
            failures.append(f"{sandbox_id}: {exc}")
    if failures:
        return Reaped(
            entry.name, "failed", f"{dead}; destroying failed ({'; '.join(failures)})", sandbox_ids
        )
    return Reaped(entry.name, "destroyed", dead, sandbox_ids)


def _ids(entry: Entry) -> tuple[str, ...]:
    return (entry.sandbox_id,) if entry.sandbox_id is not None else ()


class _NameLookup:
    """Sandbox ids by name (or, for a fork, by source), from one listing made on first use."""

    def __init__(self, client: Client, claimed: set[str]) -> None:
        self._list: Callable[[], list[SandboxInfo]] = client.sandboxes
        self._sandboxes: list[SandboxInfo] | None = None
        self._by_name: dict[str, list[str]] | None = None
        self._claimed = claimed

    def _listing(self) -> list[SandboxInfo]:
        if self._sandboxes is None:
            self._sandboxes = self._list()
        return self._sandboxes

    def __call__(self, name: str) -> tuple[str, ...]:
        if self._by_name is None:
            self._by_name = {}
            for sandbox in self._listing():
                if sandbox.name is not None and sandbox.status != "destroyed":
                    self._by_name.setdefault(sandbox.name, []).append(sandbox.id)
        return tuple(self._by_name.get(name, ()))

    def forks(self, entry: Entry) -> tuple[str, ...]:
        assert entry.fork_from is not None
        since = entry.created_at - CLOCK_MARGIN
        return tuple(unclaimed_forks(self._listing(), entry.fork_from, since, self._claimed))
