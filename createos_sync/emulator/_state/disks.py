"""Persistent disks: registrations, and their mounts in sandboxes.

A registered disk stands for an S3 bucket; here the bucket is a directory
on the host, under the emulator's root (``buckets/``), named after its
endpoint and bucket: two registrations of one bucket share its files, and a
deleted registration leaves them (as deleting one leaves the bucket).
Credentials are checked for shape and dropped: nothing here ever uses or
keeps them. A mount binds the bucket's directory (or its ``sub_path``) at
the mount path of every command started afterwards (bubblewrap: a bind;
plain mode: the path mapping), and the files API reaches it there too. The
sub path is opened beneath the bucket's directory, following no symlink, at
every one of those uses (``diskbind``): a sandbox that mounts the disk whole
may swap it for a link at any time. A mount outlives nothing: the sandbox's
destroy forgets it, the files stay.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._machine.diskbind import DiskBind, SubPathRefused
from .._machine.isolation import REPORTER_MOUNT, SYSTEM_DIRS, Isolation
from .._machine.storage import MOUNTS
from .._wire import ApiError, optional_text, text, timestamp
from .mountpaths import check_mount_path, check_sub_path
from .sandbox import Sandbox

DISK_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}\Z")
WORD = re.compile(r"[\x21-\x7e]{1,255}\Z")
ULID = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
REPORTER_DIR = REPORTER_MOUNT.rsplit("/", 1)[0]


def _ulid() -> str:
    return "".join(secrets.choice(ULID) for _ in range(26))


@dataclass
class DiskRecord:
    id: str
    name: str
    bucket: str
    endpoint: str
    region: str | None
    path_style: bool
    created_at: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        config: dict[str, Any] = {"bucket": self.bucket, "endpoint": self.endpoint}
        if self.region is not None:
            config["region"] = self.region
        if self.path_style:
            config["use_path_style"] = True
        return {
            "id": self.id,
            "name": self.name,
            "kind": "s3",
            "config": config,
            "created_at": timestamp(self.created_at),
        }


@dataclass(frozen=True)
class Mount:
    disk: DiskRecord
    mount_path: str
    sub_path: str
    bind: DiskBind

    def to_json(self) -> dict[str, Any]:
        record = self.disk.to_json()
        return {
            "disk_id": self.disk.id,
            "name": self.disk.name,
            "kind": "s3",
            "config": record["config"],
            "mount_path": self.mount_path,
            "sub_path": self.sub_path,
            "mount_status": "mounted",
            "mount_error": "",
        }


class DiskStore:
    """Every disk registration and mount of one emulator, thread-safe."""

    def __init__(self, root: Path, isolation: Isolation) -> None:
        self._buckets = root / "buckets"
        self._isolation = isolation
        self._lock = threading.Lock()
        self._disks: dict[str, DiskRecord] = {}
        self._mounts: dict[str, list[Mount]] = {}

    def register(self, body: dict[str, Any]) -> DiskRecord:
        name = text(body, "name", default="")
        if not DISK_NAME.match(name):
            raise ApiError(400, "name must match ^[a-z0-9][a-z0-9-]{0,62}$")
        if body.get("kind", "s3") != "s3":
            raise ApiError(400, "kind must be s3")
        config = body.get("config")
        if not isinstance(config, dict):
            raise ApiError(400, "config must be an object with bucket and endpoint")
        _check_credentials(body.get("credentials"))
        bucket, endpoint = text(config, "bucket", default=""), text(config, "endpoint", default="")
        if not WORD.match(bucket) or not re.match(r"https?://[^/@\s]+", endpoint):
            raise ApiError(400, "config needs a bucket and an http(s) endpoint")
        path_style = config.get("use_path_style", False)
        if not isinstance(path_style, bool):
            raise ApiError(400, "use_path_style must be a boolean")
        record = DiskRecord(
            f"disk_{_ulid()}", name, bucket, endpoint, optional_text(config, "region"), path_style
        )
        with self._lock:
            if any(d.name == name for d in self._disks.values()):
                raise ApiError(409, "a disk with this name exists")
            self._disks[record.id] = record
        return record

    def find(self, id_or_name: str) -> DiskRecord:
        with self._lock:
            record = self._disks.get(id_or_name) or next(
                (d for d in self._disks.values() if d.name == id_or_name), None
            )
        if record is None:
            raise ApiError(404, "disk not found")
        return record

    def all(self) -> list[DiskRecord]:
        with self._lock:
            return list(self._disks.values())

    def delete(self, id_or_name: str) -> None:
        record = self.find(id_or_name)
        with self._lock:
            if any(m.disk.id == record.id for ms in self._mounts.values() for m in ms):
                raise ApiError(409, "the disk is mounted in a sandbox: detach it first")
            self._disks.pop(record.id, None)

    def rotate(self, id_or_name: str, body: dict[str, Any]) -> DiskRecord:
        record = self.find(id_or_name)
        _check_credentials(body.get("credentials"))
        return record

    def check_mount(self, body: dict[str, Any]) -> tuple[DiskRecord, str, str]:
        """The disk (by id or name, as the service takes it in ``disk_id``), mount path and
        sub path a mount request asks for."""
        record = self.find(text(body, "disk_id", default=""))
        own = (*(mount for mount, _ in MOUNTS), REPORTER_DIR, *self._isolation.copied())
        path = check_mount_path(
            text(body, "mount_path", default=""), own, SYSTEM_DIRS,
            namespaced=self._isolation.namespaced,
        )  # fmt: skip
        if (
            self._isolation.namespaced
            and self._isolation.overlays is None
            and any(path == d or path.startswith(d + "/") for d in SYSTEM_DIRS)
        ):  # bubblewrap cannot make a mount point in a read-only system directory
            raise ApiError(400, "this emulator shows system directories read-only (no "
                           "overlayfs): mount the disk elsewhere, such as under /mnt")  # fmt: skip
        sub = check_sub_path(optional_text(body, "sub_path") or "")
        _checked(DiskBind(self._bucket_dir(record), sub))  # before a sandbox is made for it
        return record, path, sub

    def mount(self, sandbox: Sandbox, record: DiskRecord, path: str, sub: str) -> Mount:
        bind = _checked(DiskBind(self._bucket_dir(record), sub))  # checked again at each use
        mount = Mount(record, path, sub, bind)
        with self._lock, sandbox.lock:
            if path in sandbox.storage.binds:
                raise ApiError(409, "something is already mounted at mount_path")
            sandbox.storage.binds[path] = bind
            self._mounts.setdefault(sandbox.id, []).append(mount)
        return mount

    def unmount(self, sandbox: Sandbox, disk_id: str, path: str | None) -> bool:
        with self._lock, sandbox.lock:
            mounts = self._mounts.get(sandbox.id, [])
            gone = [m for m in mounts if m.disk.id == disk_id and path in (None, m.mount_path)]
            for mount in gone:
                mounts.remove(mount)
                sandbox.storage.binds.pop(mount.mount_path, None)
        return bool(gone)

    def mounts(self, sandbox_id: str) -> list[Mount]:
        with self._lock:
            return list(self._mounts.get(sandbox_id, []))

    def forget(self, sandbox: Sandbox) -> None:
        """The sandbox is destroyed: its mounts go, the buckets' files stay."""
        with self._lock:
            self._mounts.pop(sandbox.id, None)

    def _bucket_dir(self, record: DiskRecord) -> Path:
        key = hashlib.sha256(f"{record.endpoint}\0{record.bucket}".encode()).hexdigest()[:16]
        readable = re.sub(r"[^a-z0-9.-]", "-", record.bucket.lower())[:40]
        return self._buckets / f"{readable}-{key}"


def _checked(bind: DiskBind) -> DiskBind:
    """``bind``, its sub path made if missing; 400 if a sandbox put a link on its way."""
    try:
        bind.check()
    except SubPathRefused as exc:
        raise ApiError(400, exc.message) from None
    return bind


def _check_credentials(value: object) -> None:
    """Keys of the right shape; never kept, never echoed."""
    keys = ("access_key", "secret_key")
    if not isinstance(value, dict) or not all(
        isinstance(value.get(k), str) and WORD.match(value[k]) for k in keys
    ):
        raise ApiError(400, "credentials need an access_key and a secret_key")
