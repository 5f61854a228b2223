"""``Lease``: one sandbox, owned from ``open()`` to ``close()``, never leaked.

``Lease`` is a facade: its lifecycle and the containment rule live in
``_core``, and each capability (commands, files, sandbox features, forks) is a
mixin that validates arguments and hands over to its engine module
(``createos_sync._commands.processes``, ``createos_sync._files``, ``_traffic``, ...). Its options
(``LeaseOptions``, the ttl's ``DEFAULT_TTL`` and ``MIN_TTL``) are checked in ``_options``.
"""

from __future__ import annotations

from ._access import AccessMethods
from ._capacity import CapacityMethods
from ._commands import DEFAULT_MAX_OUTPUT
from ._computer import ComputerMethods
from ._disks import DiskMethods
from ._display import DisplayMethods
from ._features import FeatureMethods
from ._files import FileMethods
from ._fork import ForkMethods
from ._interpreter import InterpreterMethods
from ._network import NetworkMethods
from ._options import (
    DEFAULT_TTL,
    MIN_TTL,
    TTL_DEFAULT,
    LeaseKeywords,
    LeaseOptions,
    OnExit,
    TtlDefault,
)
from ._private_networks import OverlayMethods


class Lease(
    FileMethods,
    FeatureMethods,
    NetworkMethods,
    ForkMethods,
    DiskMethods,
    OverlayMethods,
    AccessMethods,
    CapacityMethods,
    ComputerMethods,
    DisplayMethods,
    InterpreterMethods,
):
    """A context manager owning one sandbox; see ``createos_sync.lease()``."""


__all__ = [
    "DEFAULT_MAX_OUTPUT",
    "DEFAULT_TTL",
    "MIN_TTL",
    "TTL_DEFAULT",
    "Lease",
    "LeaseKeywords",
    "LeaseOptions",
    "OnExit",
    "TtlDefault",
]
