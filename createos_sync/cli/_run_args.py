"""``createos-sync run``'s argument types: each value checked before a sandbox is created.

argparse turns their errors (``ArgumentTypeError``) into usage errors, status 2.
"""

from __future__ import annotations

import argparse
import os

from .. import checks
from ..lease import MIN_TTL


def disk_spec(value: str) -> tuple[str, str]:
    """``NAME:/mount/path`` -> (mount path, disk name or id), both checked."""
    disk, sep, path = value.partition(":")
    try:
        if not sep:
            raise ValueError("expected NAME:/MOUNT/PATH")
        return checks.mount_path(path), str(checks.disk(disk))
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"--disk {value!r}: {exc}") from None


def env_item(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep:
        if name not in os.environ:
            raise argparse.ArgumentTypeError(f"{name} is not set here (use K=V)")
        value = os.environ[name]
    try:
        checks.env({name: value})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return name, value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def ttl(text: str) -> float | None:
    """``--ttl``: seconds, or 0 for none."""
    if text.strip() in ("0", "0.0"):
        return None
    value = seconds(text)
    if value < MIN_TTL:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_TTL:g} seconds, or 0 for none")
    return value


def remote_path(path: str) -> str:
    try:
        return checks.remote_path(path)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{path!r}: {exc}") from None


def upload_spec(text: str) -> tuple[str, str]:
    # The remote side is absolute, so the first ":/" separates the two.
    local, sep, remote = text.partition(":/")
    if not sep or not local:
        raise argparse.ArgumentTypeError(f"expected LOCAL:REMOTE, REMOTE absolute: {text!r}")
    if not os.path.exists(local):  # found out before a sandbox is created for nothing
        raise argparse.ArgumentTypeError(f"no such file or directory: {local!r}")
    return local, remote_path("/" + remote)


def download_spec(text: str) -> tuple[str, str]:
    remote, sep, local = text.rpartition(":")
    if not sep or not local or not remote:
        raise argparse.ArgumentTypeError(f"expected REMOTE:LOCAL: {text!r}")
    check_destination(local, directory=remote.endswith("/"))
    return remote_path(remote), local


def check_destination(local: str, *, directory: bool) -> None:
    """What can be known of a download's destination before a sandbox is created for it:
    its directory exists, and it is not a directory with something in it already."""
    parent = os.path.dirname(os.path.abspath(local))
    if not os.path.isdir(parent):
        raise argparse.ArgumentTypeError(f"{local!r}: no such directory {parent!r}")
    if os.path.isdir(local) and os.listdir(local):
        raise argparse.ArgumentTypeError(
            f"{local!r} is a directory that is not empty: download into a new path"
        )
    if directory and os.path.lexists(local) and not os.path.isdir(local):
        raise argparse.ArgumentTypeError(f"{local!r} exists and is not a directory")
