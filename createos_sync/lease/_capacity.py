"""The sandbox's disk size and traffic quota."""

from __future__ import annotations

import attrs

from .._resources import checks
from .._wire import api as _api
from ..models import Bandwidth
from ._core import LeaseCore

MAX_DISK_MIB = 1 << 20


class CapacityMethods(LeaseCore):
    """Grow the disk; read and recharge the bandwidth quota."""

    def grow_disk(self, disk_mib: int) -> int:
        """Grow the sandbox's own disk to ``disk_mib`` MiB (the service never shrinks one);
        returns the new size. 1 request (an absolute size: repeated after a lost answer).

        Raises:
            ValueError, TypeError: not a positive int, or smaller than the disk's size as
                last seen (before any request).
        """
        size = checks.positive_int("disk_mib", disk_mib, limit=MAX_DISK_MIB)
        box = self._usable_box()
        known = self._info.disk_mib if self._info is not None else None
        if known is not None and size < known:
            raise ValueError(f"disks only grow: disk_mib must be at least {known}")
        answer = _api.resize_disk(box.transport, box.sandbox_id, size, self._op_deadline())
        grown = answer.get("disk_mib")
        new = grown if isinstance(grown, int) and not isinstance(grown, bool) else size
        if self._info is not None:
            self._saw(attrs.evolve(self._info, disk_mib=new))
        return new

    def bandwidth(self) -> Bandwidth:
        """The sandbox's traffic quota and usage (1 request)."""
        box = self._usable_box(paused_ok=True)
        answer = _api.get_bandwidth(box.transport, box.sandbox_id, self._op_deadline())
        return Bandwidth.from_api(answer)

    def recharge_bandwidth(self, add_bytes: int) -> Bandwidth:
        """Add ``add_bytes`` to the traffic quota; returns the new quota.

        Request budget: 1 (repeated only after 429 or 503: a repeat would add twice).
        """
        amount = checks.positive_int("add_bytes", add_bytes)
        box = self._usable_box(paused_ok=True)
        return Bandwidth.from_api(
            _api.recharge_bandwidth(box.transport, box.sandbox_id, amount, self._op_deadline())
        )
