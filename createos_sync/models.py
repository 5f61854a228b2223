"""Immutable views of the API's JSON: shapes, sandboxes, processes, templates, disks,
networks, access tokens, bandwidth.

Built with ``from_api``, which reads the fields it knows, tolerates missing
ones and ignores extra ones (the service may add fields at any time). Nothing
else of the JSON is kept: sandbox records may echo environment values. Free
text that is kept (egress rules, the ingress URL template) is checked first
(``_wire.server_text``), since a repr shows it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs

from ._wire.server_text import (
    ID,
    SIGNAL,
    STATUS,
    TEMPLATE_STATUS,
    UNRECOGNISED,
    egress_rules,
    scrub,
    token,
    url_template,
)
from .config import Secret

# The patterns server text is held to before anything shows it, public for a front end
# that prints records (the CLI's tables): see ``shown_text``.
ID_PATTERN = ID  # an id or a catalog name: sandboxes, shapes, templates, rootfs
STATUS_PATTERN = STATUS  # a sandbox's status
TEMPLATE_STATUS_PATTERN = TEMPLATE_STATUS  # a template's status


def shown_text(value: object, pattern: re.Pattern[str]) -> str | None:
    """Server text fit to show: ``value`` if it is a str matching ``pattern``, None if
    absent, else a fixed placeholder (a hostile service's text, terminal controls
    included, is never shown)."""
    return token(value, pattern)


SANDBOX_TRANSITIONAL = frozenset({"creating", "pausing", "resuming", "forking", "destroying"})
# A sandbox in one of these states will not serve again: waits stop there.
SANDBOX_UNAVAILABLE = frozenset({"error", "failed", "destroying", "destroyed"})


def _str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None


def _int(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _bool(data: Mapping[str, Any], key: str) -> bool | None:
    value = data.get(key)
    return value if isinstance(value, bool) else None


def _time(data: Mapping[str, Any], key: str) -> datetime | None:
    value = data.get(key)
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


@attrs.frozen
class Shape:
    """A machine shape from the catalog."""

    id: str
    vcpu: float | None = None
    memory_mib: int | None = None
    default_disk_mib: int | None = None
    cpu_quota_pct: int | None = None

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Shape:
        """Build one from ``data``, the API's JSON object (missing or extra fields are fine)."""
        return cls(
            id=_str(data, "id") or "",
            vcpu=_number(data, "vcpu"),
            memory_mib=_int(data, "mem_mib"),
            default_disk_mib=_int(data, "default_disk_mib"),
            cpu_quota_pct=_int(data, "cpu_quota_pct"),
        )


@attrs.frozen
class SandboxInfo:
    """A sandbox as last read from the service."""

    id: str
    status: str
    shape: str | None = None
    rootfs: str | None = None
    region: str | None = None
    created_at: datetime | None = None
    name: str | None = None
    ip: str | None = None
    vcpu: float | None = None
    memory_mib: int | None = None
    disk_mib: int | None = None
    paused_at: datetime | None = None
    auto_pause_after: int | None = None
    ingress_enabled: bool | None = None
    # Preview URLs: replace "<port>" (``Lease.preview_url`` does, and checks the result).
    ingress_url_template: str | None = None
    egress: tuple[str, ...] | None = None
    forked_from: str | None = None

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> SandboxInfo:
        """Build one from ``data``, the API's JSON object (missing or extra fields are fine)."""
        rules = egress_rules(data.get("egress"))
        return cls(
            id=_str(data, "id") or "",
            # Shown in reprs and messages: a known status, or a fixed placeholder.
            status=token(data.get("status"), STATUS) or "unknown",
            shape=_str(data, "shape"),
            rootfs=_str(data, "rootfs"),
            region=_str(data, "region"),
            created_at=_time(data, "created_at"),
            name=_str(data, "name"),
            ip=_str(data, "ip"),
            vcpu=_number(data, "vcpu"),
            memory_mib=_int(data, "mem_mib"),
            disk_mib=_int(data, "disk_mib"),
            paused_at=_time(data, "paused_at"),
            auto_pause_after=_int(data, "auto_pause_after_seconds"),
            ingress_enabled=_bool(data, "ingress_enabled"),
            ingress_url_template=url_template(data.get("ingress_url_template")),
            egress=tuple(rules) if rules is not None else None,
            forked_from=_str(data, "forked_from"),
        )


@attrs.frozen
class ProcessInfo:
    """A managed process as last read from the service."""

    id: str
    state: str
    pid: int | None = None
    leader_exited: bool | None = None
    tree_exited: bool | None = None
    exit_code: int | None = None
    signal: str | None = None
    oldest_seq: int | None = None
    newest_seq: int | None = None

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> ProcessInfo:
        """Build one from ``data``, the API's JSON object (missing or extra fields are fine)."""
        output = data.get("output")
        output = output if isinstance(output, Mapping) else {}
        return cls(
            id=_str(data, "process_id") or "",
            state=_str(data, "state") or "unknown",
            pid=_int(data, "pid"),
            leader_exited=_bool(data, "leader_exited"),
            tree_exited=_bool(data, "tree_exited"),
            exit_code=_int(data, "exit_code"),
            signal=token(_str(data, "signal"), SIGNAL),
            oldest_seq=_int(output, "oldest_seq"),
            newest_seq=_int(output, "newest_seq"),
        )


@attrs.frozen
class Template:
    """A custom root file system built from a Dockerfile; use it as ``rootfs=template.id``.

    ``status`` is ``pending``, ``building``, ``ready`` or ``failed``. The
    Dockerfile itself is not kept (the service returns it only on request).
    """

    id: str
    name: str
    status: str
    base: str | None = None
    created_at: datetime | None = None
    built_at: datetime | None = None
    size_bytes: int | None = None

    @property
    def ready(self) -> bool:
        return self.status == "ready"

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Template:
        """Build one from ``data``, the API's JSON object (missing or extra fields are fine)."""
        return cls(
            id=_str(data, "id") or "",
            name=_str(data, "name") or "",
            # Shown in messages and `template ls`: a known status, or a fixed placeholder.
            status=token(data.get("status"), TEMPLATE_STATUS) or "unknown",
            base=_str(data, "base") or None,
            created_at=_time(data, "created_at"),
            built_at=_time(data, "built_at"),
            size_bytes=_int(data, "ext4_size_bytes"),
        )


# Names, buckets and endpoints are server text shown in reprs: checked first.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_PRINTABLE = re.compile(r"[\x21-\x7e]{1,512}\Z")
_MOUNT_STATUS = re.compile(r"(?:pending|mounted|error|unmounting)\Z")


def _ip(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return UNRECOGNISED


class AccessToken(Secret):
    """A sandbox access token: use it as ``Client(api_key=token)`` for that sandbox alone."""

    __slots__ = ()


@attrs.frozen
class Disk:
    """A persistent disk registration (an S3 bucket); its credentials are never kept."""

    id: str
    name: str
    kind: str | None = None
    bucket: str | None = None
    endpoint: str | None = None
    region: str | None = None
    path_style: bool | None = None
    created_at: datetime | None = None

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Disk:
        """Build one from ``data``, the API's JSON object (missing or extra fields are fine)."""
        config = data.get("config")
        config = config if isinstance(config, Mapping) else {}
        return cls(
            id=token(data.get("id"), _NAME) or "",
            name=token(data.get("name"), _NAME) or "",
            kind=token(data.get("kind"), _NAME),
            bucket=token(config.get("bucket"), _PRINTABLE),
            endpoint=token(config.get("endpoint"), _PRINTABLE),
            region=token(config.get("region") or None, _PRINTABLE),
            path_style=_bool(config, "use_path_style"),
            created_at=_time(data, "created_at"),
        )


@attrs.frozen
class DiskMount:
    """A disk mounted in a sandbox: where, and whether the mount is ready."""

    disk_id: str
    mount_path: str
    name: str | None = None
    sub_path: str | None = None
    status: str | None = None  # pending, mounted, error or unmounting
    error: str | None = None

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> DiskMount:
        """Build one from ``data``, the API's JSON object (missing or extra fields are fine)."""
        return cls(
            disk_id=token(data.get("disk_id"), _NAME) or "",
            mount_path=token(data.get("mount_path"), _PRINTABLE) or "",
            name=token(data.get("name"), _NAME),
            sub_path=token(data.get("sub_path") or None, _PRINTABLE),
            status=token(data.get("mount_status"), _MOUNT_STATUS),
            error=scrub(data.get("mount_error"), ()),
        )


@attrs.frozen
class Network:
    """A private network; ``members`` maps each member sandbox's id to its ip on it
    (None for a moment after it joins)."""

    id: str
    name: str
    members: Mapping[str, str | None] = attrs.field(factory=dict, hash=False)
    created_at: datetime | None = None

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Network:
        """Build one from ``data``, the API's JSON object (missing or extra fields are fine)."""
        members: dict[str, str | None] = {}
        listed = data.get("members")
        for member in listed if isinstance(listed, list) else []:
            if isinstance(member, Mapping):
                sandbox_id = token(member.get("sandbox_id"), _NAME)
                if sandbox_id is not None:
                    members[sandbox_id] = _ip(member.get("ip"))
        return cls(
            id=token(data.get("id"), _NAME) or "",
            name=token(data.get("name"), _NAME) or "",
            members=members,
            created_at=_time(data, "created_at"),
        )


@attrs.frozen
class AccessTokenInfo:
    """A sandbox's access token as the service describes it: never its plaintext."""

    enabled: bool
    hint: str | None = None
    created_at: datetime | None = None
    rotated_at: datetime | None = None

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> AccessTokenInfo:
        """Build one from ``data``, the API's JSON object (missing or extra fields are fine)."""
        return cls(
            enabled=_bool(data, "enabled") is True,
            hint=token(data.get("token_hint"), _PRINTABLE),
            created_at=_time(data, "created_at"),
            rotated_at=_time(data, "rotated_at"),
        )


@attrs.frozen
class Bandwidth:
    """A sandbox's traffic quota and what it used of it, in bytes."""

    quota_bytes: int | None = None
    used_bytes: int | None = None
    ingress_bytes: int | None = None
    remaining_bytes: int | None = None
    capped: bool | None = None

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Bandwidth:
        """Build one from ``data``, the API's JSON object (missing or extra fields are fine)."""
        return cls(
            quota_bytes=_int(data, "quota_bytes"),
            used_bytes=_int(data, "used_bytes"),
            ingress_bytes=_int(data, "ingress_bytes"),
            remaining_bytes=_int(data, "remaining_bytes"),
            capped=_bool(data, "capped"),
        )
