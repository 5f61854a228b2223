"""The argument rules of leases and commands, for a front end that refuses bad input
before it opens anything (the CLI is one).

Each function applies the rule the lease applies itself, with the same
exception and message (``ValueError`` or ``TypeError``, never a value of an
environment variable), and sends no request. The rules live in the private
rooms; this module only names them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ._commands.command import Command, validate_env
from ._files import check_remote_path
from ._resources import checks as _checks
from ._resources import disks as _disks
from .models import Disk


def command(
    cmd: str | Sequence[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None
) -> None:
    """``Lease.run``'s rules for a command (a bash script or an argv), its cwd and env."""
    Command.parse(cmd, cwd=cwd, env=env)


def env(variables: Mapping[str, str] | None) -> dict[str, str]:
    """Environment variables as ``env=`` takes them: names ``[A-Za-z_][A-Za-z0-9_]*``,
    str values without NUL."""
    return validate_env(variables)


def remote_path(path: str) -> str:
    """A path in the sandbox: absolute, a str without NUL."""
    return check_remote_path(path)


def mount_path(path: object) -> str:
    """Where a disk may be mounted: absolute, normalised, not ``/`` nor under /proc,
    /sys or /dev."""
    return _checks.mount_path(path)


def disk(ref: object) -> Disk | str:
    """A disk as ``disks=`` and ``attach_disk`` take it: a ``Disk``, its id or its name."""
    return _disks.check_ref(ref)
