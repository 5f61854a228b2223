"""Persistent disks: registering one, and naming one by id for a mount.

A disk is an S3 bucket registered with the account; its credentials go to
the service once (at registration, or a rotation) and are never kept here:
they travel as ``Secret`` values, whose repr is masked, and the transport
scrubs them from any server message. The service detaches only by the
disk's id (``disk_<ulid>``), so a lease always mounts by id, and resolves a
name to its id first (1 request).
"""

from __future__ import annotations

from .._wire import api as _api
from .._wire.deadline import Deadline
from .._wire.http import Transport
from ..config import Secret
from ..models import Disk
from . import checks

DiskRef = Disk | str


def registration(
    name: str,
    *,
    bucket: str,
    endpoint: str,
    access_key: str,
    secret_key: str,
    region: str | None,
    path_style: bool,
) -> dict[str, object]:
    """The ``POST /disks`` body, every value checked (keys as masked ``Secret`` values)."""
    config: dict[str, object] = {
        "bucket": checks.word("bucket", bucket),
        "endpoint": checks.endpoint(endpoint),
    }
    if region is not None:
        config["region"] = checks.word("region", region)
    if checks.flag("path_style", path_style):
        config["use_path_style"] = True
    return {
        "name": checks.disk_name(name),
        "kind": "s3",
        "config": config,
        "credentials": credentials(access_key, secret_key),
    }


def masked(access_key: object, secret_key: object) -> tuple[Secret, Secret]:
    """The keys as ``Secret`` values (repr ``'***'``), as the API key is held: a traceback
    rendered with frame locals (``pytest -l``, rich, Sentry) shows them masked. A ``str``
    is needed: anything else would be shown as it is."""
    if not isinstance(access_key, str) or not isinstance(secret_key, str):
        raise TypeError("access_key and secret_key must be str")
    return Secret(access_key), Secret(secret_key)


def credentials(access_key: str, secret_key: str) -> dict[str, str]:
    return {
        "access_key": Secret(checks.word("access_key", access_key, secret=True)),
        "secret_key": Secret(checks.word("secret_key", secret_key, secret=True)),
    }


def check_ref(disk: object) -> DiskRef:
    """A ``Disk``, a disk id (``disk_...``) or a disk name."""
    if isinstance(disk, Disk):
        return disk
    if isinstance(disk, str) and "_" in disk:
        return checks.identifier("disk id", disk)
    if isinstance(disk, str):
        return checks.disk_name(disk)
    raise TypeError("disk must be a Disk, a disk id or a disk name")


def ref_key(disk: DiskRef) -> str:
    """What the service takes in a path for this disk: its id, or its name."""
    return disk.id if isinstance(disk, Disk) else disk


def resolve_id(transport: Transport, disk: DiskRef, deadline: Deadline) -> str:
    """The disk's id: no request for a ``Disk`` or an id, 1 to look a name up."""
    if isinstance(disk, Disk):
        return disk.id
    if "_" in disk:
        return disk
    found = Disk.from_api(_api.get_disk(transport, disk, deadline))
    return checks.identifier("disk id in the answer to a disk lookup", found.id)
