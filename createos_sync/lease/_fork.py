"""The lease's ``fork()``: a new lease owning a copy of this sandbox (engine: ``_fork``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import EllipsisType
from typing import TypeVar

from ._core import LeaseCore
from ._options import TTL_DEFAULT, LeaseOptions, OnExit, TtlDefault

L = TypeVar("L", bound=LeaseCore)


class ForkMethods(LeaseCore):
    """``fork``: prepare a sandbox once, then start many from it."""

    def fork(
        self: L,
        *,
        name: str | None = None,
        egress: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        ingress: bool | None = None,
        start_paused: bool = False,
        on_exit: OnExit | None = None,
        ttl: float | TtlDefault | EllipsisType | None = TTL_DEFAULT,
        max_lifetime: float | None = None,
    ) -> L:
        """An open lease owning a new sandbox forked from this one (running or paused).

        The fork gets a copy of this sandbox's disk; this lease and its sandbox
        are not touched (a paused one stays paused). The new lease follows
        ``lease()``'s rules: journaled before and after, its sandbox destroyed
        at its close (``on_exit``), a lost answer recovered (see
        ``createos_sync._sandboxes.fork``: the service takes no name on a fork, so
        ``name`` is a prefix for the local journal only). It uses this lease's
        client and timeout. Safe to call from many threads at once.

        Args:
            egress: the fork's egress rules (None: the source's).
            env: the fork's variables (None: the source's).
            ingress: True or False switches preview URLs; None keeps the source's.
            start_paused: the fork starts paused, and its lease opens on it
                paused: ``run()`` and file calls raise ``SandboxUnavailable``
                until ``resume()`` (which also arms its ``ttl``).
            on_exit: as for ``lease()``.
            ttl: as for ``lease()``.
            max_lifetime: as for ``lease()``.

        Request budget: 1 fork plus status polls until it runs (or is paused),
        plus 1 for its ttl watchdog (made at its first ``resume()`` when
        ``start_paused``); after a lost answer, 1 listing per 500 sandboxes
        (3 when no answer came at all), 1 marker read per unclaimed fork of
        the source, and 1 destroy for the fork found.

        Raises:
            ValueError, TypeError: invalid arguments, before any request.
            LeaseClosed: this lease is not open.
            CreateosApiError: the fork was refused, or its outcome was unknown
                (the message says what was found and destroyed).
            CreateosCleanupError: a fork may exist that could not be destroyed,
                or whose marker could not be read (the journal keeps its entry).
        """
        options = LeaseOptions(
            name=name,
            egress=egress,
            env=env,
            ingress=ingress,
            start_paused=start_paused,
            on_exit=on_exit,
            ttl=ttl,
            max_lifetime=max_lifetime,
            fork_from=self._usable_box(paused_ok=True).sandbox_id,
            timeout=self._options.timeout,
            journal=self._options.journal,
        )
        return type(self)(self._client, options, journal=self._record.journal).open()
