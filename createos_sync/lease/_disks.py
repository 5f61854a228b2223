"""The lease's persistent disks: mount, unmount, list (engine: ``_resources.disks``)."""

from __future__ import annotations

from .._resources import checks
from .._resources import disks as _disks
from .._wire import api as _api
from ..models import Disk, DiskMount
from ._core import LeaseCore


class DiskMethods(LeaseCore):
    """Persistent disks mounted in the sandbox; the lease detaches what it mounted before
    it destroys the sandbox (a detach flushes the disk to its bucket)."""

    def attach_disk(
        self, disk: Disk | str, mount_path: str, *, sub_path: str | None = None
    ) -> DiskMount:
        """Mount ``disk`` (a ``Disk``, its id or its name) at ``mount_path`` in the running sandbox.

        ``sub_path``: a folder of the bucket to mount instead of its root. The
        mount may still be ``pending`` when this returns (see ``disks()``).

        Request budget: 1 (2 when ``disk`` is a name: it is looked up first).

        Raises:
            ValueError, TypeError: an invalid disk, mount path or sub path (before any request).
            CreateosApiError: refused (the sandbox is not running, an unknown disk...), or
                the outcome is unknown (never sent twice: see ``disks()``).
        """
        ref = _disks.check_ref(disk)
        path = checks.mount_path(mount_path)
        sub = checks.sub_path(sub_path)
        box = self._usable_box()
        deadline = self._op_deadline()
        disk_id = _disks.resolve_id(box.transport, ref, deadline)
        _api.attach_disk(box.transport, box.sandbox_id, disk_id, path, sub, deadline)
        self._attached.add_disk(disk_id, path)
        return DiskMount(disk_id=disk_id, mount_path=path, sub_path=sub, status="pending")

    def detach_disk(self, disk: Disk | str, mount_path: str) -> bool:
        """Unmount ``disk`` from ``mount_path``, flushing it to its bucket; False if it was
        not mounted there.

        Request budget: 1 (2 when ``disk`` is a name: the service detaches by id only).
        """
        ref = _disks.check_ref(disk)
        path = checks.mount_path(mount_path)
        box = self._usable_box()
        deadline = self._op_deadline()
        disk_id = _disks.resolve_id(box.transport, ref, deadline)
        detached = _api.detach_disk(box.transport, box.sandbox_id, disk_id, path, deadline)
        self._attached.drop_disk(disk_id, path)
        return detached

    def disks(self) -> list[DiskMount]:
        """The disks mounted in the sandbox, with their mount status (1 request per 500)."""
        box = self._usable_box(paused_ok=True)
        found = _api.list_sandbox_disks(box.transport, box.sandbox_id, self._op_deadline())
        return [DiskMount.from_api(d) for d in found]
