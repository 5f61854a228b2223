"""createos_sync: a synchronous SDK for CreateOS sandboxes that never leaks one.

::

    import createos_sync as cs

    with cs.lease() as box:
        print(box.run("echo hello").stdout)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._reap import reap
from ._registry import close_all
from ._registry import open_leases as leases
from .client import Client
from .config import Config, default_shape
from .errors import (
    CommandFailed,
    CommandTimeout,
    ConfigError,
    CreateosApiError,
    CreateosCleanupError,
    CreateosError,
    LeaseClosed,
    OperationTimeout,
    OutputLostError,
    ProtocolError,
    SandboxUnavailable,
    UnsafeArchiveError,
    is_cleanup_error,
)
from .lease import Lease, OnExit
from .models import ProcessInfo, SandboxInfo, Shape
from .process import Process
from .result import RunResult

__version__ = "0.1.0"


def lease(
    shape: str | None = None,
    *,
    rootfs: str | None = None,
    region: str | None = None,
    name: str | None = None,
    egress: Sequence[Mapping[str, Any]] | None = None,
    env: Mapping[str, str] | None = None,
    auto_pause_after: int | None = None,
    max_lifetime: float | None = None,
    sandbox_id: str | None = None,
    on_exit: OnExit | None = None,
    client: Client | None = None,
    timeout: float | None = None,
) -> Lease:
    """A lease on one sandbox: ``with cs.lease() as box: box.run(...)``.

    ``shape`` falls back to ``CREATEOS_SHAPE``, then ``"s-1vcpu-1gb"``.
    ``sandbox_id`` attaches to an existing sandbox (resumed if paused) instead
    of creating one. ``on_exit`` is ``"destroy"`` (default for a created
    sandbox), ``"keep"`` (default when attaching) or ``"pause"``.
    ``max_lifetime`` (seconds) closes the lease from a timer at expiry.
    Without ``client``, one is built from the environment and owned by the
    lease. Nothing is sent before ``open()`` / ``with``.

    Raises:
        ConfigError: missing or invalid configuration (e.g. no API key).
        ValueError: invalid arguments.
    """
    owned = client is None
    the_client = Client() if client is None else client
    try:
        return Lease(
            the_client,
            shape=shape or default_shape(),
            rootfs=rootfs,
            region=region,
            name=name,
            egress=egress,
            env=env,
            auto_pause_after=auto_pause_after,
            max_lifetime=max_lifetime,
            sandbox_id=sandbox_id,
            on_exit=on_exit,
            timeout=timeout,
            owns_client=owned,
        )
    except BaseException:
        if owned:
            the_client.close()
        raise


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
    "OperationTimeout",
    "OutputLostError",
    "Process",
    "ProcessInfo",
    "ProtocolError",
    "RunResult",
    "SandboxInfo",
    "SandboxUnavailable",
    "Shape",
    "UnsafeArchiveError",
    "__version__",
    "close_all",
    "is_cleanup_error",
    "lease",
    "leases",
    "reap",
]
