"""The catalog and the sandboxes: lifecycle, forks, egress, ingress, auto-pause."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ...errors import Operation, ProtocolError
from ..deadline import Deadline
from ..http import Transport
from ..retry import Repeat
from .common import _items, _object, _pages, _sandbox

# Catalog


def list_shapes(t: Transport, deadline: Deadline) -> list[Any]:
    reply = t.call(
        "GET", "/shapes", operation=Operation.CATALOG, repeat=Repeat.SAFE, deadline=deadline
    )
    return _items(reply.data, Operation.CATALOG, "shapes")[0]


def list_rootfs(t: Transport, deadline: Deadline) -> list[str]:
    """The names of the published root file systems (the answer is ``{rootfs: [names], ...}``)."""
    reply = t.call(
        "GET", "/rootfs", operation=Operation.CATALOG, repeat=Repeat.SAFE, deadline=deadline
    )
    names = _object(reply.data, Operation.CATALOG).get("rootfs")
    if not isinstance(names, list):
        raise ProtocolError(f"the answer to {Operation.CATALOG} has no list of root file systems")
    return [name for name in names if isinstance(name, str)]


# Sandboxes


def create_sandbox(t: Transport, body: Mapping[str, Any], deadline: Deadline) -> dict[str, Any]:
    reply = t.call(
        "POST",
        "/sandboxes",
        operation=Operation.SANDBOX_CREATION,
        repeat=Repeat.REFUSED_ONLY,
        deadline=deadline,
        json_body=dict(body),
    )
    return _object(reply.data, Operation.SANDBOX_CREATION)


def get_sandbox(t: Transport, sandbox_id: str, deadline: Deadline) -> dict[str, Any]:
    reply = t.call(
        "GET",
        _sandbox(sandbox_id),
        operation=Operation.SANDBOX_LIFECYCLE,
        repeat=Repeat.SAFE,
        deadline=deadline,
    )
    return _object(reply.data, Operation.SANDBOX_LIFECYCLE)


def list_sandboxes(t: Transport, deadline: Deadline) -> Iterator[dict[str, Any]]:
    """Every sandbox, page by page (one request per 500)."""
    return _pages(t, "/sandboxes", Operation.SANDBOX_LISTING, "sandboxes", deadline)


def sandbox_name(sandbox: Mapping[str, Any]) -> str | None:
    """(inferred) The name given at creation, as the service reports it back."""
    name = sandbox.get("name")
    return name if isinstance(name, str) else None


def fork_sandbox(
    t: Transport, source_id: str, body: Mapping[str, Any], deadline: Deadline
) -> dict[str, Any]:
    """Fork a sandbox: a creation, so never repeated after an unknown outcome (429/503 are)."""
    reply = t.call(
        "POST",
        f"{_sandbox(source_id)}/fork",
        operation=Operation.SANDBOX_FORK,
        repeat=Repeat.REFUSED_ONLY,
        deadline=deadline,
        json_body=dict(body),
    )
    return _object(reply.data, Operation.SANDBOX_FORK)


def reports_forks(sandboxes: list[dict[str, Any]]) -> bool:
    """Whether a listing says which sandboxes are forks (the field, even null, is present)."""
    return any("forked_from" in s for s in sandboxes)


def delete_sandbox(t: Transport, sandbox_id: str, deadline: Deadline) -> bool:
    """Destroy a sandbox; 404 means it is already gone, which is success (False)."""
    reply = t.call(
        "DELETE",
        _sandbox(sandbox_id),
        operation=Operation.SANDBOX_CLEANUP,
        repeat=Repeat.SAFE,
        deadline=deadline,
        allow=frozenset({404}),
    )
    return reply.status != 404


def request_transition(t: Transport, sandbox_id: str, verb: str, deadline: Deadline) -> bool:
    """Ask for ``pause`` or ``resume``; False on 409 (a transition is already under way)."""
    reply = t.call(
        "POST",
        f"{_sandbox(sandbox_id)}/{verb}",
        operation=Operation.SANDBOX_LIFECYCLE,
        repeat=Repeat.SAFE,
        deadline=deadline,
        allow=frozenset({409}),
    )
    return reply.status != 409


def get_egress(t: Transport, sandbox_id: str, deadline: Deadline) -> Any:
    """The egress rules as the service answers them (a list, or None for "allow all")."""
    reply = t.call(
        "GET",
        f"{_sandbox(sandbox_id)}/egress",
        operation=Operation.SANDBOX_SETTINGS,
        repeat=Repeat.SAFE,
        deadline=deadline,
    )
    return _object(reply.data, Operation.SANDBOX_SETTINGS).get("egress")


def put_egress(t: Transport, sandbox_id: str, rules: list[str], deadline: Deadline) -> Any:
    """Replace the egress rules; answers them as the service now has them."""
    reply = t.call(
        "PUT",
        f"{_sandbox(sandbox_id)}/egress",
        operation=Operation.SANDBOX_SETTINGS,
        repeat=Repeat.SAFE,  # the rules are replaced whole: sending them twice changes nothing
        deadline=deadline,
        json_body={"egress": rules},
    )
    return _object(reply.data, Operation.SANDBOX_SETTINGS).get("egress")


def set_ingress(t: Transport, sandbox_id: str, enabled: bool, deadline: Deadline) -> dict[str, Any]:
    """Switch public ingress; answers the sandbox."""
    return _patch_sandbox(t, sandbox_id, {"ingress_enabled": enabled}, deadline)


def set_auto_pause(
    t: Transport, sandbox_id: str, seconds: int | None, deadline: Deadline
) -> dict[str, Any]:
    """Pause after ``seconds`` idle, or never (None); answers the sandbox."""
    body: dict[str, Any] = (
        {"disable_auto_pause": True} if seconds is None else {"auto_pause_after_seconds": seconds}
    )
    return _patch_sandbox(t, sandbox_id, body, deadline)


def _patch_sandbox(
    t: Transport, sandbox_id: str, body: dict[str, Any], deadline: Deadline
) -> dict[str, Any]:
    reply = t.call(
        "PATCH",
        _sandbox(sandbox_id),
        operation=Operation.SANDBOX_SETTINGS,
        repeat=Repeat.SAFE,  # absolute values: a repeat after a lost answer changes nothing
        deadline=deadline,
        json_body=body,
    )
    return _object(reply.data, Operation.SANDBOX_SETTINGS)
