"""The containment rule at ``close()`` (the lease's lifecycle is in ``_core``).

Runs with interrupts held (``close()`` holds them), each request
``delivered()``: an interrupt acts at once during a request or a wait, and
never between a destroy and its record. ``_settled`` says when nothing is
left to name: the sandbox is confirmed destroyed, or left as ``on_exit``
asked; until then an exception escaping ``close()`` names the sandbox and
its processes (``_name_leftovers``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, TypeVar

from .._commands import session as _session
from .._sandboxes import sandbox as _sandbox
from .._sandboxes import shield as _shield
from .._sandboxes.attachments import Attachments
from .._sandboxes.box import Box
from .._sandboxes.containment import CleanupTime, terminate_unfinished
from .._sandboxes.watchdog import Watchdog
from .._wire.deadline import Deadline
from ..errors import CreateosCleanupError, CreateosError, attach_cleanup_failure
from ..models import SandboxInfo
from . import _ttl
from ._making import Record
from ._options import OnExit

if TYPE_CHECKING:
    from ..client import Client

log = logging.getLogger("createos_sync.lease")

Seen = TypeVar("Seen", SandboxInfo, None)


class Containment:
    """What ``LeaseCore.close()`` runs once the lease is closing."""

    _client: Client
    _record: Record
    _box: Box | None
    _info: SandboxInfo | None
    _watchdog: Watchdog
    _on_exit: OnExit
    _on_exit_chosen: bool  # given to lease() or close(), not the default
    _settled: bool  # destroyed, or left as on_exit asked: nothing to name
    _attached: Attachments

    def _saw(self, info: Seen) -> Seen:
        """Keep ``info`` as the sandbox's last record seen (None: the sandbox is gone).

        The one writer of ``_info`` (``LeaseCore`` starts it at None), which
        ``status``, ``preview_url`` and ``grow_disk`` read: every part of the
        lease hands the records it gets here.
        """
        self._info = info
        return info

    def _name_leftovers(self, exc: BaseException) -> None:
        """``close()`` was cut short: unless its sandbox is gone, ``exc`` names what is left."""
        box = self._box
        if box is None or self._settled:
            return
        processes = [*box.table.unfinished(), *box.table.unconfirmed_ids]
        running = f" with process {', '.join(processes)}" if processes else ""
        kept = (
            "the lease journal keeps it for `createos-sync reap`"
            if self._record.journal is not None and self._record.name is not None
            else f"destroy it with `createos-sync destroy {box.sandbox_id}`"
        )
        attach_cleanup_failure(
            exc,
            CreateosCleanupError(
                f"closing the lease was interrupted: sandbox {box.sandbox_id} may still be "
                f"running{running} ({kept})",
                sandbox_id=box.sandbox_id,
                process_ids=processes,
                sandbox_destroyed=None,
            ),
        )

    def _contain(self) -> CreateosCleanupError | None:
        """The containment rule at close; runs held, each request ``delivered()``."""
        box = self._box
        if box is None:
            return None
        if self._watchdog.gone:  # deleted by its watchdog (or by someone else): nothing is left
            self._settled = True
            self._forget_journal()
            return None
        budget = CleanupTime.of(box.transport)
        try:
            with _shield.delivered():
                _session.retire(box, sandbox_ends=self._on_exit == "destroy")
                terminate_unfinished(box.transport, box.sandbox_id, box.table, budget)
        except KeyboardInterrupt:
            log.warning(
                "interrupted while terminating processes: destroying sandbox %s", box.sandbox_id
            )
            self._watchdog.cancel()
            self._destroyed(box, self._cleanup_deadline())
            raise
        destroys = box.table.poisoned or self._on_exit == "destroy"
        with _shield.delivered():  # its requests: the disposal's bookkeeping holds again
            return self._attached.letting_go(
                box, budget, destroys, lambda: self._dispose(box, budget)
            )

    def _dispose(self, box: Box, budget: CleanupTime) -> CreateosCleanupError | None:
        """Destroy, keep or pause the sandbox, as the containment rule and ``on_exit`` say."""
        with _shield.held():
            return self._disposed(box, budget)

    def _disposed(self, box: Box, budget: CleanupTime) -> CreateosCleanupError | None:
        if box.table.poisoned:
            return self._destroy_poisoned(box, budget.destroy())
        if self._on_exit == "destroy":
            self._watchdog.cancel()  # destroyed with its sandbox: no request of its own
            if not self._destroyed(box, budget.destroy()):
                return CreateosCleanupError(
                    f"sandbox {box.sandbox_id} could not be destroyed: it may still be running "
                    f"(retry with `createos-sync destroy {box.sandbox_id}`)",
                    sandbox_id=box.sandbox_id,
                    sandbox_destroyed=False,
                )
            self._saw(None)
            return None
        kept = "kept" if self._on_exit == "keep" else "paused"
        with _shield.delivered():
            failure = _ttl.stop(self._watchdog, box.sandbox_id, kept, budget)
        if failure is not None:
            return failure
        if self._watchdog.gone:  # found deleted while stopping it: nothing is left
            self._settled = True
            self._forget_journal()
            return None
        if self._on_exit == "pause":
            try:
                with _shield.delivered():
                    info = _sandbox.pause(
                        box.transport, box.sandbox_id, budget.destroy(), self._client.sleep
                    )
                self._saw(info)
            except CreateosError as exc:
                return CreateosCleanupError(
                    f"sandbox {box.sandbox_id} could not be paused ({exc}): it is still running",
                    sandbox_id=box.sandbox_id,
                    sandbox_destroyed=None,
                )
        self._settled = True  # left as on_exit asked: nothing to name
        # Kept or paused as asked (not by an attach's default): no sweep may take it later.
        self._forget_journal(gone=False, kept=self._on_exit_chosen)
        return None

    def _destroyed(self, box: Box, deadline: Deadline) -> bool:
        """Destroy the sandbox (1 request); once confirmed, forget its journal entry."""
        with _shield.delivered():
            destroyed = _sandbox.destroy(box.transport, box.sandbox_id, deadline)
        if destroyed:
            self._settled = True
            self._forget_journal()
        return destroyed

    def _destroy_poisoned(self, box: Box, deadline: Deadline) -> CreateosCleanupError:
        why, suspects = box.table.why_poisoned(), box.table.unconfirmed_ids
        self._watchdog.cancel()
        destroyed = self._destroyed(box, deadline)
        if destroyed:
            outcome = f"sandbox {box.sandbox_id} was destroyed instead"
        else:
            outcome = (
                f"destroying sandbox {box.sandbox_id} failed too: it may still be running "
                f"(retry with `createos-sync destroy {box.sandbox_id}`)"
            )
        return CreateosCleanupError(
            f"containment unconfirmed: {why}; {outcome}",
            sandbox_id=box.sandbox_id,
            process_ids=suspects,
            sandbox_destroyed=destroyed,
        )

    def _forget_journal(self, *, gone: bool = True, kept: bool = False) -> None:
        self._record.forget(gone=gone, kept=kept)

    def _cleanup_deadline(self) -> Deadline:
        return Deadline.after(self._client._transport.config.cleanup_timeout)
