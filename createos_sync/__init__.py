"""createos_sync: a synchronous SDK for CreateOS sandboxes that never leaks one.

::

    import createos_sync as cs

    with cs.lease() as box:
        print(box.run("echo hello").stdout)
"""

from __future__ import annotations

import importlib as _importlib
from types import ModuleType as _ModuleType
from typing import TYPE_CHECKING, Any

from ._sandboxes.reap import reap
from .cancel import Cancel
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
    RemoteFileNotFoundError,
    RunCancelled,
    SandboxUnavailable,
    TemplateBuildError,
    UnsafeArchiveError,
    is_cleanup_error,
)
from .lease import Lease
from .lease._options import lease_options as _lease_options
from .lease._options import takes_lease_keywords as _takes_lease_keywords
from .lease._registry import close_all
from .lease._registry import open_leases as leases
from .models import (
    AccessTokenInfo,
    Bandwidth,
    Disk,
    DiskMount,
    Network,
    ProcessInfo,
    SandboxInfo,
    Shape,
    Template,
)
from .process import Process
from .result import RunResult

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .computer import Screenshot, Window
    from .fanout import map
    from .interpreter import CodeContext, CodeFailed, Execution, ExecutionError, Result
    from .lease._options import LeaseKeywords

__version__ = "0.1.0"


@_takes_lease_keywords
def lease(
    shape: str | None = None, *, client: Client | None = None, **options: Unpack[LeaseKeywords]
) -> Lease:
    """A lease on one sandbox: ``with cs.lease() as box: box.run(...)``.

    Args:
        shape: the machine shape (see the lease keywords below).
        client: defaults to a ``Client()`` from the environment, owned by the lease.
        options: the lease keywords below.

    Nothing is sent before ``open()`` / ``with``.

    Raises:
        ConfigError: missing or invalid configuration (e.g. no API key).
        ValueError, TypeError: invalid arguments.
    """
    checked = _lease_options("lease", shape, options)
    if client is not None:
        return Lease(client, checked)
    return Lease(Client(), checked, owns_client=True)


__all__ = [
    "AccessTokenInfo",
    "Bandwidth",
    "Cancel",
    "Client",
    "CodeContext",
    "CodeFailed",
    "CommandFailed",
    "CommandTimeout",
    "Config",
    "ConfigError",
    "CreateosApiError",
    "CreateosCleanupError",
    "CreateosError",
    "Disk",
    "DiskMount",
    "Execution",
    "ExecutionError",
    "Lease",
    "LeaseClosed",
    "LeaseExpired",
    "Network",
    "OperationTimeout",
    "OutputLostError",
    "Process",
    "ProcessInfo",
    "ProtocolError",
    "RemoteFileNotFoundError",
    "Result",
    "RunCancelled",
    "RunResult",
    "SandboxInfo",
    "SandboxUnavailable",
    "Screenshot",
    "Shape",
    "Template",
    "TemplateBuildError",
    "UnsafeArchiveError",
    "Window",
    "__version__",
    "close_all",
    "is_cleanup_error",
    "lease",
    "leases",
    "load_ipython_extension",
    "map",
    "reap",
    "unload_ipython_extension",
]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext createos_sync``: the ``%%createos`` cell magic and ``%createos_close``,
    registered on the ``ipython`` shell.

    IPython is imported only here, never when ``createos_sync`` is.
    """
    from .interpreter import _magics as _ipython

    _ipython.load(ipython, lease_type=Lease, new_lease=lease)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext createos_sync``: closes the lease the magic opened in ``ipython``, if any."""
    from .interpreter import _magics as _ipython

    _ipython.unload(ipython)


# Imported at first use: a program that only runs commands does not pay for them.
_ON_FIRST_USE = {
    "Screenshot": ".computer",
    "Window": ".computer",
    "map": ".fanout",
    **dict.fromkeys(
        ("CodeContext", "CodeFailed", "Execution", "ExecutionError", "Result"), ".interpreter"
    ),
}


def __getattr__(name: str) -> Any:
    """The public names of ``_ON_FIRST_USE``, imported when first read."""
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """``dir(createos_sync)`` (and so tab completion): the public names and submodules,
    not the helpers this module imports for itself (``Mapping``, ``annotations``...)."""
    names = {*__all__, *(n for n in globals() if n.startswith("__"))}
    names.update(
        n
        for n, v in globals().items()
        if isinstance(v, _ModuleType) and n.isidentifier() and not n.startswith("_")
    )
    return sorted(names)
