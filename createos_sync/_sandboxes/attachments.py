"""What a lease attached to its sandbox, and letting go of it at ``close()``.

Containment covers attachments: before the lease destroys its sandbox, it
detaches every disk it mounted (a detach flushes the disk to its bucket:
a destroy alone may lose the last writes) and takes the sandbox off every
network it joined; when it leaves the sandbox running (``"keep"``,
``"pause"``), disks and networks stay as they are, but an access token the
lease made is disabled, so that no key to the sandbox outlives the lease
unnoticed. A failure to let go is never swallowed: ``close()`` reports it as
a ``CreateosCleanupError`` (the destroy still happens).

A network the lease made (``box.create_network``) is deleted once the sandbox
is destroyed; left, with the sandbox in it, when the lease keeps it.

Request budget at close: 1 per disk and per network the lease attached
(when destroying), or 1 when it made a token (when keeping or pausing);
then 1 per network it made, plus 1 per "in use" answer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import attrs

from .._resources import networks as _networks
from .._wire import api as _api
from .._wire.deadline import Deadline
from ..errors import CreateosApiError, CreateosCleanupError, CreateosError, add_note
from .box import Box
from .containment import CleanupTime

Dispose = Callable[[], CreateosCleanupError | None]


@attrs.define
class Attachments:
    """Disks (id, mount path) and networks (ids) the lease attached; whether it made a token."""

    disks: list[tuple[str, str]] = attrs.Factory(list)
    networks: list[str] = attrs.Factory(list)
    made_networks: list[str] = attrs.Factory(list)  # deleted once the sandbox is destroyed
    token: bool = False
    lock: threading.Lock = attrs.field(factory=threading.Lock, repr=False)
    # Told of each made network deleted (the lease journal forgets it).
    deleted: Callable[[str], None] = attrs.field(default=lambda network_id: None, repr=False)

    def add_disk(self, disk_id: str, mount_path: str) -> None:
        with self.lock:
            if (disk_id, mount_path) not in self.disks:
                self.disks.append((disk_id, mount_path))

    def drop_disk(self, disk_id: str, mount_path: str) -> None:
        with self.lock:
            if (disk_id, mount_path) in self.disks:
                self.disks.remove((disk_id, mount_path))

    def add_network(self, network_id: str) -> None:
        with self.lock:
            if network_id not in self.networks:
                self.networks.append(network_id)

    def drop_network(self, network_id: str) -> None:
        with self.lock:
            if network_id in self.networks:
                self.networks.remove(network_id)

    def letting_go(
        self, box: Box, budget: CleanupTime, destroying: bool, dispose: Dispose
    ) -> CreateosCleanupError | None:
        """``close()``'s step: let go of what it must, ``dispose`` of the sandbox (destroy,
        keep or pause it), then delete the networks the lease made if it is destroyed."""
        released = self.release(box, budget.read(), destroying=destroying)
        failure = dispose()
        if failure is None and destroying:  # its members gone: the networks the lease made
            released += self.delete_networks(box, budget.read())
        return merged(failure, released, box.sandbox_id, destroying)

    def release(self, box: Box, deadline: Deadline, *, destroying: bool) -> list[str]:
        """Let go of what ``close()`` must (see the module); what could not be, in words."""
        with self.lock:
            disks, networks, token = list(self.disks), list(self.networks), self.token
        failed = []
        if destroying:
            for disk_id, path in disks:
                try:
                    _api.detach_disk(box.transport, box.sandbox_id, disk_id, path, deadline)
                    self.drop_disk(disk_id, path)
                except CreateosError as exc:
                    failed.append(f"disk {disk_id} at {path} was not detached (flushed) ({exc})")
            for network_id in networks:
                try:
                    _api.detach_network(box.transport, box.sandbox_id, network_id, deadline)
                except CreateosApiError as exc:
                    if exc.status != 409:  # 409: not running (paused): the destroy takes it off
                        failed.append(f"network {network_id} was not detached ({exc})")
                        continue
                except CreateosError as exc:
                    failed.append(f"network {network_id} was not detached ({exc})")
                    continue
                self.drop_network(network_id)
        elif token:
            try:
                _api.disable_access_token(box.transport, box.sandbox_id, deadline)
                self.token = False
            except CreateosError as exc:
                failed.append(f"its access token could not be disabled and still works ({exc})")
        return failed

    def delete_networks(self, box: Box, deadline: Deadline) -> list[str]:
        """Delete the networks the lease made, once its sandbox is destroyed; the service
        says "in use" for a few seconds after its members go: asked again for up to 30 s."""
        with self.lock:
            made, self.made_networks = list(self.made_networks), []
        failed = []
        for network_id in made:
            try:
                _networks.delete(box.transport, network_id, deadline, box.sleep)
            except CreateosError as exc:
                failed.append(f"network {network_id}, made by the lease, was not deleted ({exc})")
                continue
            self.deleted(network_id)
        return failed


def merged(
    failure: CreateosCleanupError | None, released: list[str], sandbox_id: str, destroyed: bool
) -> CreateosCleanupError | None:
    """The close's outcome with the attachments that could not be let go of added to it."""
    if not released:
        return failure
    what = "; ".join(released)
    if failure is not None:
        add_note(failure, f"also: {what}")
        return failure
    return CreateosCleanupError(
        f"sandbox {sandbox_id}: {what}",
        sandbox_id=sandbox_id,
        sandbox_destroyed=True if destroyed else None,
    )
