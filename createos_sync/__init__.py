"""createos_sync: a synchronous SDK for CreateOS sandboxes that never leaks one.

::

    import createos_sync as cs

    with cs.lease() as box:
        print(box.run("echo hello").stdout)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ._sandboxes.options import LeaseOptions as _LeaseOptions
from ._sandboxes.reap import reap
from ._sandboxes.registry import close_all
from ._sandboxes.registry import open_leases as leases
from .client import Client
from .config import Config
from .errors import (
    CommandFailed,
    CommandTimeout,
    ConfigError,
    CreateosApiError,
    CreateosCleanupError,
    CreateosError,
    LeaseClosed,
    LeaseExpired,
    OperationTimeout,
    OutputLostError,
    ProtocolError,
    SandboxUnavailable,
    TemplateBuildError,
    UnsafeArchiveError,
    is_cleanup_error,
)
from .fanout import map
from .lease import Lease, OnExit
from .models import ProcessInfo, SandboxInfo, Shape, Template
from .process import Process
from .result import RunResult

if TYPE_CHECKING:
    from types import EllipsisType

__version__ = "0.1.0"


def lease(
    shape: str | None = None,
    *,
    rootfs: str | None = None,
    region: str | None = None,
    name: str | None = None,
    egress: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    ingress: bool | None = False,
    auto_pause_after: int | None = None,
    max_lifetime: float | None = None,
    ttl: float | EllipsisType | None = ...,
    sandbox_id: str | None = None,
    fork_from: str | None = None,
    start_paused: bool = False,
    on_exit: OnExit | None = None,
    client: Client | None = None,
    timeout: float | None = None,
    journal: bool = True,
) -> Lease:
    """A lease on one sandbox: ``with cs.lease() as box: box.run(...)``.

    Args:
        shape: the machine shape; falls back to ``CREATEOS_SHAPE``, then
            ``"s-1vcpu-1gb"``.
        rootfs: a base image (``"ubuntu:24.04"``) or a ready template's id.
        region: where to place the sandbox (the service chooses by default).
        name: a prefix; the sandbox's name is it plus a unique suffix.
        egress: outbound rules (``["pypi.org", "*.github.com", "10.0.0.0/8"]``);
            None allows everything.
        env: variables of the sandbox (fixed at creation).
        ingress: make the sandbox's ports reachable by preview URLs.
        auto_pause_after: CreateOS's idle auto-pause, whole seconds in 60..86400.
        max_lifetime: seconds after which a timer closes the lease.
        ttl: the dead man's switch: seconds without renewal after which the
            sandbox deletes itself (default 900 for a sandbox this lease
            creates or forks, off when attaching; None turns it off).
        sandbox_id: attach to this existing sandbox (resumed if paused).
        fork_from: make the sandbox a fork of this one (running or paused), with
            a copy of its disk; the lease owns the fork, never the source.
            ``egress`` and ``env`` are then the fork's (None: the source's), and
            ``ingress`` is sent as given (None keeps the source's).
        start_paused: with ``fork_from``, the fork starts paused and the lease
            opens on it paused (``run()`` raises until ``resume()``).
        on_exit: ``"destroy"`` (default for a created or forked sandbox),
            ``"keep"`` (default when attaching) or ``"pause"``.
        client: defaults to a ``Client()`` from the environment, owned by the lease.
        timeout: the deadline of one operation and the default command timeout.
        journal: record the sandbox in the local lease journal (the crash-safety
            record ``createos-sync reap`` works from) before it is created; if
            the journal cannot be written, ``open()`` raises ``ConfigError``
            before any request. ``False`` (or ``CREATEOS_SYNC_JOURNAL=off`` in
            the environment) opts out: the lease then keeps no record.

    Nothing is sent before ``open()`` / ``with``.

    Raises:
        ConfigError: missing or invalid configuration (e.g. no API key).
        ValueError, TypeError: invalid arguments.
    """
    options = _LeaseOptions(
        shape=shape,
        rootfs=rootfs,
        region=region,
        name=name,
        egress=egress,
        env=env,
        ingress=ingress,
        auto_pause_after=auto_pause_after,
        max_lifetime=max_lifetime,
        ttl=ttl,
        sandbox_id=sandbox_id,
        fork_from=fork_from,
        start_paused=start_paused,
        on_exit=on_exit,
        timeout=timeout,
        journal=journal,
    )
    if client is not None:
        return Lease(client, options)
    return Lease(Client(), options, owns_client=True)


__all__ = [
    "Client",
    "CommandFailed",
    "CommandTimeout",
    "Config",
    "ConfigError",
    "CreateosApiError",
    "CreateosCleanupError",
    "CreateosError",
    "Lease",
    "LeaseClosed",
    "LeaseExpired",
    "OperationTimeout",
    "OutputLostError",
    "Process",
    "ProcessInfo",
    "ProtocolError",
    "RunResult",
    "SandboxInfo",
    "SandboxUnavailable",
    "Shape",
    "Template",
    "TemplateBuildError",
    "UnsafeArchiveError",
    "__version__",
    "close_all",
    "is_cleanup_error",
    "lease",
    "leases",
    "map",
    "reap",
]
