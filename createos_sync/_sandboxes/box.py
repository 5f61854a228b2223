"""What the parts of a lease share once its sandbox exists."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import attrs

from .._wire.deadline import Deadline
from .._wire.http import Transport
from .._wire.retry import Sleep
from ..errors import SandboxUnavailable
from .containment import ProcessTable

Explain = Callable[[SandboxUnavailable], SandboxUnavailable]


def _as_is(error: SandboxUnavailable) -> SandboxUnavailable:
    return error


@attrs.frozen
class Box:
    """One open sandbox as its processes and file transfers see it."""

    transport: Transport
    sandbox_id: str
    table: ProcessTable = attrs.field(factory=ProcessTable)
    sleep: Sleep = attrs.field(default=time.sleep, repr=False)
    # Set when the lease starts closing (possibly from another thread, e.g. at
    # max_lifetime); it is the table's, which then refuses new processes.
    closing: threading.Event = attrs.field(
        default=attrs.Factory(lambda self: self.table.closing, takes_self=True), repr=False
    )
    # What to raise for the sandbox found destroyed under a command: the lease's ttl
    # watchdog makes it ``LeaseExpired`` when the ttl could have run out.
    explain: Explain = attrs.field(default=_as_is, repr=False)

    def deadline(self, seconds: float | None = None) -> Deadline:
        """A deadline of ``seconds``, by default the client's operation timeout."""
        return Deadline.after(self.transport.config.timeout if seconds is None else seconds)

    def cleanup_deadline(self) -> Deadline:
        """Cleanup never inherits a caller's (possibly spent) deadline."""
        return Deadline.after(self.transport.config.cleanup_timeout)
