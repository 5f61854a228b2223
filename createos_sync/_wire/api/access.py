"""A sandbox's access tokens, SSH keys, disk size and bandwidth; a sandbox by its ip."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from ...config import Secret
from ...errors import Operation
from ..deadline import Deadline
from ..http import Transport
from ..retry import Repeat
from .common import _object, _sandbox

TOKEN = Operation.ACCESS_TOKEN
SETTINGS = Operation.SANDBOX_SETTINGS


def create_access_token(t: Transport, sandbox_id: str, deadline: Deadline) -> dict[str, Any]:
    """A new token (its plaintext in this answer only): never repeated after a lost answer."""
    reply = t.call(
        "POST", f"{_sandbox(sandbox_id)}/access-token", operation=TOKEN,
        repeat=Repeat.REFUSED_ONLY, deadline=deadline,
    )  # fmt: skip
    return _masked(_object(reply.data, TOKEN))


def rotate_access_token(t: Transport, sandbox_id: str, deadline: Deadline) -> dict[str, Any]:
    """Replace the token (the old one stops working): never repeated after a lost answer."""
    reply = t.call(
        "POST", f"{_sandbox(sandbox_id)}/access-token/rotate", operation=TOKEN,
        repeat=Repeat.REFUSED_ONLY, deadline=deadline,
    )  # fmt: skip
    return _masked(_object(reply.data, TOKEN))


def _masked(answer: dict[str, Any]) -> dict[str, Any]:
    """The answer with its plaintext token masked in reprs (a traceback's locals show them)."""
    if isinstance(answer.get("token"), str):
        answer["token"] = Secret(answer["token"])
    return answer


def get_access_token(t: Transport, sandbox_id: str, deadline: Deadline) -> dict[str, Any]:
    """The token's state and hint, never its plaintext."""
    reply = t.call(
        "GET", f"{_sandbox(sandbox_id)}/access-token", operation=TOKEN, repeat=Repeat.SAFE,
        deadline=deadline,
    )  # fmt: skip
    return _object(reply.data, TOKEN)


def disable_access_token(t: Transport, sandbox_id: str, deadline: Deadline) -> None:
    """Revoke the token; one already gone (404) counts as revoked."""
    t.call(
        "DELETE", f"{_sandbox(sandbox_id)}/access-token", operation=TOKEN, repeat=Repeat.SAFE,
        deadline=deadline, allow=frozenset({404}),
    )  # fmt: skip


def resize_disk(t: Transport, sandbox_id: str, disk_mib: int, deadline: Deadline) -> dict[str, Any]:
    """Grow the sandbox's disk to ``disk_mib`` (an absolute size: a repeat changes nothing)."""
    reply = t.call(
        "POST", f"{_sandbox(sandbox_id)}/resize", operation=SETTINGS, repeat=Repeat.SAFE,
        deadline=deadline, json_body={"disk_mib": disk_mib},
    )  # fmt: skip
    return _object(reply.data, SETTINGS)


def add_ssh_keys(t: Transport, sandbox_id: str, keys: list[str], deadline: Deadline) -> Any:
    """Add OpenSSH public keys; answers ``{count}`` (a POST: repeated after 429/503 only)."""
    reply = t.call(
        "POST", f"{_sandbox(sandbox_id)}/ssh-pubkeys", operation=SETTINGS,
        repeat=Repeat.REFUSED_ONLY, deadline=deadline, json_body={"keys": keys},
    )  # fmt: skip
    return _object(reply.data, SETTINGS).get("count")


def get_bandwidth(t: Transport, sandbox_id: str, deadline: Deadline) -> dict[str, Any]:
    reply = t.call(
        "GET", f"{_sandbox(sandbox_id)}/bandwidth", operation=SETTINGS, repeat=Repeat.SAFE,
        deadline=deadline,
    )  # fmt: skip
    return _object(reply.data, SETTINGS)


def recharge_bandwidth(
    t: Transport, sandbox_id: str, add_bytes: int, deadline: Deadline
) -> dict[str, Any]:
    """Add to the quota: a repeat would add twice, so only after 429 or 503."""
    reply = t.call(
        "POST", f"{_sandbox(sandbox_id)}/bandwidth/recharge", operation=SETTINGS,
        repeat=Repeat.REFUSED_ONLY, deadline=deadline, json_body={"add_bytes": add_bytes},
    )  # fmt: skip
    return _object(reply.data, SETTINGS)


def sandbox_by_ip(t: Transport, ip: str, deadline: Deadline) -> dict[str, Any]:
    reply = t.call(
        "GET", f"/sandboxes/by-ip/{quote(ip, safe='')}", operation=Operation.SANDBOX_LIFECYCLE,
        repeat=Repeat.SAFE, deadline=deadline,
    )  # fmt: skip
    return _object(reply.data, Operation.SANDBOX_LIFECYCLE)
