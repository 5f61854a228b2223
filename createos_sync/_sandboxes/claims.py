"""Claims: who is attached to a journaled sandbox, and which reap is destroying one.

The auto-reap destroys the sandboxes of journal entries whose owner died. A
lease attaching by id to such a sandbox (a notebook kernel restarted) must
win over it, whatever the order in which the two start (issue 42). So both
sides act under the journal's lock, in one transaction each:

- ``claim`` (an attach, before its first request): if a live reap already
  marked the sandbox, the attach is refused (it cannot be saved); else the
  entries of dead owners naming the sandbox pass to this process (``taken``),
  and an ``attach`` claim records that this process holds it. An entry whose
  owner is alive stays its owner's: the sandbox is shared.
- ``begin_reap`` (a reap, just before its destroy): the entry must be
  unchanged since the reap read it, and no live lease attached to its
  sandbox; then a ``reap`` claim marks it, and the destroy is sent.

A claim names its process (pid, start time, host), so that one of a process
that died is ignored, and pruned by the next transaction.
"""

from __future__ import annotations

import os
import secrets
import socket
from typing import Any, Literal

import attrs

from ..config import service_key
from .journal import Change, Entry, Journal, _process_start, process_alive

Purpose = Literal["attach", "reap"]


class Held(Exception):
    """A reap must leave this entry: the message says why (it is shown to the user)."""


@attrs.frozen
class Claim:
    """A live process's hold on a sandbox (``attach``), or its destroy under way (``reap``)."""

    sandbox_id: str
    base_url: str
    purpose: Purpose
    token: str = attrs.field(factory=lambda: secrets.token_hex(8))
    pid: int = attrs.field(factory=os.getpid)
    process_start: str | None = attrs.field(factory=lambda: _process_start(os.getpid()))
    host: str = attrs.field(factory=socket.gethostname)

    def alive(self) -> bool:
        return process_alive(self.pid, self.process_start, self.host) is not False

    def about(self, sandbox_ids: tuple[str, ...], base_url: str) -> bool:
        return self.sandbox_id in sandbox_ids and service_key(self.base_url) == service_key(
            base_url
        )


@attrs.frozen
class Attached:
    """What ``claim`` did: the token of the attach claim, the entries it took, and the
    live holders it shares the sandbox with."""

    sandbox_id: str
    base_url: str
    token: str
    taken: tuple[str, ...]
    holders: tuple[int, ...]


def _parse(item: Any) -> Claim | None:
    try:
        claim = Claim(**item)
    except TypeError:
        return None
    fields_ok = isinstance(claim.pid, int) and claim.purpose in ("attach", "reap")
    return claim if fields_ok else None


def _live(raw: list[Any]) -> tuple[list[Any], list[Claim]]:
    """The raw claims without those of dead processes, and the live ones parsed."""
    kept, live = [], []
    for item in raw:
        claim = _parse(item) if isinstance(item, dict) else None
        if claim is not None and not claim.alive():
            continue  # its process died: it holds nothing any more
        kept.append(item)
        if claim is not None:
            live.append(claim)
    return kept, live


def claim(journal: Journal, sandbox_id: str, base_url: str) -> Attached:
    """Claim ``sandbox_id`` for a lease of this process about to attach to it.

    Raises:
        Held: a live reap is destroying it (the message says which process).
        OSError: the journal could not be updated.
    """

    def change(entries: list[Entry], raw: list[Any]) -> Change[Attached]:
        raw, live = _live(raw)
        for other in live:
            if other.purpose == "reap" and other.about((sandbox_id,), base_url):
                raise Held(f"being destroyed by a reap (process {other.pid})")
        same, taken, holders = [], [], set()
        for e in entries:
            if e.sandbox_id != sandbox_id or service_key(e.base_url) != service_key(base_url):
                same.append(e)
            elif e.owner_alive() is False:  # its lease died: the entry passes to this one
                same.append(e.taken())
                taken.append(e.name)
            else:
                same.append(e)
                holders.add(e.pid)
        mine = Claim(sandbox_id, base_url, "attach")
        done = Attached(sandbox_id, base_url, mine.token, tuple(taken), tuple(sorted(holders)))
        return same, [*raw, attrs.asdict(mine)], done

    return journal.transact(change)


def release(journal: Journal, attached: Attached, *, gone: bool) -> None:
    """The attached lease closed: drop its claim; if the sandbox is ``gone`` (destroyed,
    or deliberately kept: ``on_exit`` given), the entries naming it too, but those of
    another live process. Left by an attach's default, the entries it took stay this
    process's: a sweep leaves them while it lives.

    Raises:
        OSError: the journal could not be updated.
    """

    def change(entries: list[Entry], raw: list[Any]) -> Change[None]:
        raw, _ = _live(raw)
        raw = [c for c in raw if not (isinstance(c, dict) and c.get("token") == attached.token)]
        if gone:  # every entry naming it, but those another live process holds
            entries = [e for e in entries if not _forgotten_with(e, attached)]
        return entries, raw, None

    journal.transact(change)


def _forgotten_with(entry: Entry, attached: Attached) -> bool:
    """Whether ``entry`` goes once ``attached``'s sandbox is destroyed: it names that
    sandbox, and no other live process holds it (that one forgets its own)."""
    if entry.sandbox_id != attached.sandbox_id:
        return False
    if service_key(entry.base_url) != service_key(attached.base_url):
        return False
    return entry.pid == os.getpid() or entry.owner_alive() is False


def begin_reap(
    journal: Journal, entry: Entry, sandbox_ids: tuple[str, ...], *, held_ok: bool
) -> str:
    """Mark ``sandbox_ids`` (``entry``'s) as being destroyed by this process; the token.

    ``held_ok``: the caller confirmed taking a sandbox a live lease is attached to
    (``reap --all``).

    Raises:
        Held: leave the entry: it changed since it was read, a live lease is attached
            to its sandbox, or another reap is destroying it.
        OSError: the journal could not be updated: nothing may be destroyed unmarked.
    """

    def change(entries: list[Entry], raw: list[Any]) -> Change[str]:
        raw, live = _live(raw)
        now = next((e for e in entries if e.name == entry.name), None)
        if now is None:
            raise Held("its entry was removed meanwhile")
        if (now.pid, now.process_start, now.sandbox_id) != (
            entry.pid,
            entry.process_start,
            entry.sandbox_id,
        ):
            raise Held(f"a lease of process {now.pid} took it meanwhile (it attached to it)")
        for other in live:
            if not other.about(sandbox_ids, entry.base_url):
                continue
            if other.purpose == "reap":
                raise Held(f"another reap (process {other.pid}) is destroying it")
            if not held_ok:
                raise Held(
                    f"a live lease of process {other.pid} is attached to it "
                    "(`reap --all` takes it anyway)"
                )
        token = secrets.token_hex(8)
        marks = [
            attrs.asdict(Claim(sandbox_id, entry.base_url, "reap", token))
            for sandbox_id in sandbox_ids
        ]
        return entries, [*raw, *marks], token

    return journal.transact(change)


def end_reap(journal: Journal, entry: Entry, token: str, *, destroyed: bool) -> None:
    """The destroy ended: drop the marks; if it was ``destroyed``, the entry too.

    Raises:
        OSError: the journal could not be updated.
    """

    def change(entries: list[Entry], raw: list[Any]) -> Change[None]:
        raw, _ = _live(raw)
        raw = [c for c in raw if not (isinstance(c, dict) and c.get("token") == token)]
        if destroyed:
            entries = [e for e in entries if e.name != entry.name]
        return entries, raw, None

    journal.transact(change)


def attached(journal: Journal, base_url: str) -> dict[str, tuple[int, ...]]:
    """The pids of the live leases attached to each sandbox of ``base_url``'s service
    (a read: nothing is written, not even the pruning of dead claims)."""

    def change(entries: list[Entry], raw: list[Any]) -> Change[dict[str, tuple[int, ...]]]:
        _, live = _live(raw)
        holders: dict[str, set[int]] = {}
        for c in live:
            if c.purpose == "attach" and service_key(c.base_url) == service_key(base_url):
                holders.setdefault(c.sandbox_id, set()).add(c.pid)
        return entries, raw, {k: tuple(sorted(v)) for k, v in holders.items()}

    return journal.transact(change)
