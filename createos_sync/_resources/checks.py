"""Checks of the arguments of disks, networks, tokens and the sandbox extras (before any
request): each raises ``ValueError`` or ``TypeError`` naming the argument, never its value
when that value is a secret."""

from __future__ import annotations

import ipaddress
import posixpath
import re
from collections.abc import Sequence
from urllib.parse import urlsplit

# The official SDKs' rule for disk names.
DISK_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}\Z")
NETWORK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")
_WORD = re.compile(r"[\x21-\x7e]{1,255}\Z")  # printable ASCII, no space
_SSH_KEY = re.compile(r"(?:ssh|ecdsa|sk)-[A-Za-z0-9@.-]+ [A-Za-z0-9+/=]+(?: [^\x00-\x1f\x7f]*)?\Z")
# Where a disk may not go: the system's own trees.
RESERVED = ("/proc", "/sys", "/dev")
MAX_PATH = 4096


def disk_name(value: object) -> str:
    if not isinstance(value, str) or not DISK_NAME.match(value):
        raise ValueError(
            "a disk name is 1..63 lowercase letters, digits and '-', starting with a letter "
            "or digit"
        )
    return value


def network_name(value: object) -> str:
    if not isinstance(value, str) or not NETWORK_NAME.match(value):
        raise ValueError("a network name is 1..63 letters, digits, '.', '_' and '-'")
    return value


def word(what: str, value: object, *, secret: bool = False) -> str:
    """A non-empty printable ASCII string without spaces (a bucket, a region, a key)."""
    if not isinstance(value, str) or not _WORD.match(value):
        shown = "" if secret else f", not {value!r}"
        raise ValueError(f"{what} must be 1..255 printable ASCII characters without spaces{shown}")
    return value


def endpoint(value: object) -> str:
    """An S3 endpoint: an absolute http(s) URL with a host and no user information."""
    if not isinstance(value, str) or not _WORD.match(value):
        raise ValueError("endpoint must be an http(s) URL such as 'https://s3.amazonaws.com'")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise ValueError("endpoint is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("endpoint must be an http(s) URL with a host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("endpoint must not hold user information: give access_key, secret_key")
    return value


def flag(what: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be True or False")
    return value


def mount_path(value: object) -> str:
    """An absolute, normalised path that is not the root nor under /proc, /sys or /dev."""
    if not isinstance(value, str) or not value.startswith("/"):
        raise ValueError("mount_path must be an absolute path such as '/mnt/data'")
    if len(value) > MAX_PATH or not value.isprintable():
        raise ValueError("mount_path must be printable and at most 4096 characters")
    if posixpath.normpath(value) != value or value.startswith("//"):
        raise ValueError("mount_path must be normalised: no '.', '..', '//' or trailing '/'")
    if value == "/" or any(value == r or value.startswith(r + "/") for r in RESERVED):
        raise ValueError("mount_path cannot be '/', nor under /proc, /sys or /dev")
    return value


def sub_path(value: object) -> str | None:
    """A folder of the bucket: a relative, normalised path, or None (the bucket's root)."""
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not value
        or value.startswith("/")
        or len(value) > MAX_PATH
        or not value.isprintable()
        or posixpath.normpath(value) != value
        or value.startswith("..")
    ):
        raise ValueError("sub_path must be a relative, normalised path such as 'ci/cache'")
    return value


def ssh_keys(value: object) -> list[str]:
    """OpenSSH public keys ("ssh-ed25519 AAAA... comment"), at least one."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise ValueError("ssh keys must be a non-empty sequence of OpenSSH public key strings")
    keys = []
    for key in value:
        if not isinstance(key, str) or not _SSH_KEY.match(key.strip()):
            raise ValueError(
                "every ssh key must be one OpenSSH public key line ('ssh-ed25519 AAAA... name')"
            )
        keys.append(key.strip())
    return keys


def positive_int(what: str, value: object, *, limit: int = 1 << 53) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int")
    if not 0 < value <= limit:
        raise ValueError(f"{what} must be in 1..{limit}")
    return value


def ip(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("ip must be a str such as '10.0.0.2'")
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address") from None


def identifier(what: str, value: object) -> str:
    if not isinstance(value, str) or not value or not _WORD.match(value):
        raise ValueError(f"{what} must be a non-empty str without spaces")
    return value
