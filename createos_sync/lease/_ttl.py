"""The lease's side of its ttl (engine: ``_sandboxes.watchdog``): when it is armed, let go.

- Armed once, in ``open()``, where every way of opening (a creation, a fork,
  an attach) meets with the sandbox running. A fork made ``start_paused`` is
  armed by its first ``resume()`` instead (``Watchdog.resumed``): a watchdog
  started in a paused sandbox would count the pause.
- Let go (its process terminated) when the lease keeps or pauses its sandbox
  at close, and when ``open()`` fails on an attached sandbox (not the lease's
  to destroy): it must never delete a sandbox the lease no longer holds.
- Cancelled without a request when its sandbox is destroyed anyway.

A fork copies its source's disk, the renewal file of the source's watchdog
included, but never its processes. Each lease's watchdog reads a file of its
own (``Watchdog.name`` is random), so a copied file is read by nothing: it
can neither renew, hold, stop nor fire the fork's watchdog.
"""

from __future__ import annotations

from .._sandboxes import shield as _shield
from .._sandboxes.box import Box
from .._sandboxes.containment import CleanupTime
from .._sandboxes.watchdog import Watchdog
from .._wire.deadline import Deadline
from ..errors import CreateosCleanupError, CreateosError
from ..models import SandboxInfo


def arm(watchdog: Watchdog, box: Box, info: SandboxInfo, deadline: Deadline) -> None:
    """Start the watchdog of a sandbox just opened (1 request), unless it opened paused."""
    if info.status != "running":  # a fork made start_paused: its first resume() arms it
        return
    with _shield.delivered():  # a request: Ctrl-C acts at once, and open() undoes itself
        watchdog.arm(box, deadline)


def stop(
    watchdog: Watchdog, sandbox_id: str, instead: str, budget: CleanupTime | None = None
) -> CreateosCleanupError | None:
    """Let go of the watchdog of a sandbox the lease leaves running (or paused): 1 request.

    Returns the failure to report when it may still fire: the sandbox would
    delete itself within the ttl instead of being ``instead`` ("kept"...).
    A sandbox found gone meanwhile is no failure (``watchdog.gone`` says so).
    ``budget``: the close's cleanup time, if it is the close's step.
    """
    try:
        watchdog.stop(budget)
    except CreateosError as exc:
        return CreateosCleanupError(
            f"the ttl watchdog of sandbox {sandbox_id} could not be stopped ({exc}): "
            f"the sandbox will delete itself within {watchdog.ttl:g} s instead of being {instead}",
            sandbox_id=sandbox_id,
            sandbox_destroyed=None,
        )
    return None
