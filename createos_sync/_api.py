"""One function per CreateOS endpoint: the only place paths and wire field names live.

Functions take a ``Transport`` and a ``Deadline``, and return decoded JSON
(``dict``) or a ``Stream``. Details PROTOCOL.md marks as inferred each sit in
exactly one function here.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

from ._deadline import Deadline
from ._http import Body, Stream, Transport
from ._retry import Repeat
from ._server_text import checked_id
from .errors import Operation, ProtocolError

PAGE_LIMIT = 500
STREAM_IDLE_TIMEOUT = 60.0  # no byte, not even a heartbeat, for this long: the stream is dead
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE"})


def _sandbox(sandbox_id: str) -> str:
    return f"/sandboxes/{quote(sandbox_id, safe='')}"


def _process(sandbox_id: str, process_id: str) -> str:
    return f"{_sandbox(sandbox_id)}/processes/{quote(process_id, safe='')}"


def _object(data: Any, operation: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ProtocolError(f"the answer to {operation} is not a JSON object")
    return data


def _items(data: Any, operation: str, *legacy_keys: str) -> tuple[list[Any], int | None]:
    """Accept a bare list, a page ``{data, pagination}``, or a legacy keyed list."""
    if isinstance(data, list):
        return data, None
    if isinstance(data, dict):
        for key in ("data", *legacy_keys):
            if isinstance(data.get(key), list):
                pagination = data.get("pagination")
                total = pagination.get("total") if isinstance(pagination, dict) else None
                return data[key], total if isinstance(total, int) else None
    raise ProtocolError(f"the answer to {operation} is not a list")


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


def list_sandboxes(
    t: Transport, deadline: Deadline, *, status: str | None = None
) -> Iterator[dict[str, Any]]:
    """Every sandbox, page by page (one request per 500)."""
    offset = 0
    while True:
        params = {"limit": str(PAGE_LIMIT), "offset": str(offset)}
        if status is not None:
            params["status"] = status
        reply = t.call(
            "GET",
            "/sandboxes",
            operation=Operation.SANDBOX_LISTING,
            repeat=Repeat.SAFE,
            deadline=deadline,
            params=params,
        )
        items, total = _items(reply.data, Operation.SANDBOX_LISTING, "sandboxes")
        for item in items:
            yield _object(item, Operation.SANDBOX_LISTING)
        offset += len(items)
        if not items or total is None or offset >= total:
            return


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


# Templates


def _template(template_id: str) -> str:
    return f"/templates/{quote(template_id, safe='')}"


def create_template(
    t: Transport, name: str, dockerfile: str, base: str | None, deadline: Deadline
) -> dict[str, Any]:
    """Submit a build; a lost answer is not repeated (a build may have started)."""
    body = {"name": name, "dockerfile": dockerfile}
    if base is not None:
        body["base"] = base
    reply = t.call(
        "POST",
        "/templates",
        operation=Operation.TEMPLATE_BUILD,
        repeat=Repeat.REFUSED_ONLY,
        deadline=deadline,
        json_body=body,
    )
    data = _object(reply.data, Operation.TEMPLATE_BUILD)
    checked_id(data.get("id"), "template id in the answer to a template build")
    return data


def get_template(t: Transport, template_id: str, deadline: Deadline) -> dict[str, Any]:
    reply = t.call(
        "GET",
        _template(template_id),
        operation=Operation.TEMPLATE_MANAGEMENT,
        repeat=Repeat.SAFE,
        deadline=deadline,
    )
    return _object(reply.data, Operation.TEMPLATE_MANAGEMENT)


def list_templates(t: Transport, deadline: Deadline) -> Iterator[dict[str, Any]]:
    """Every template, page by page (one request per 500)."""
    offset = 0
    while True:
        reply = t.call(
            "GET",
            "/templates",
            operation=Operation.TEMPLATE_MANAGEMENT,
            repeat=Repeat.SAFE,
            deadline=deadline,
            params={"limit": str(PAGE_LIMIT), "offset": str(offset)},
        )
        items, total = _items(reply.data, Operation.TEMPLATE_MANAGEMENT, "templates")
        for item in items:
            yield _object(item, Operation.TEMPLATE_MANAGEMENT)
        offset += len(items)
        if not items or total is None or offset >= total:
            return


def delete_template(t: Transport, template_id: str, deadline: Deadline) -> None:
    """Delete a template; 404 means it is already gone, which is success."""
    t.call(
        "DELETE",
        _template(template_id),
        operation=Operation.TEMPLATE_MANAGEMENT,
        repeat=Repeat.SAFE,
        deadline=deadline,
        allow=frozenset({404}),
    )


def follow_template_log(t: Transport, template_id: str, deadline: Deadline) -> Stream:
    """The build log as NDJSON events ``{ts, level, line, attempt, final, status}``, live.

    (inferred) Each connection replays the log from its first line, then
    follows it until the final event.
    """
    return t.stream(
        "GET",
        f"{_template(template_id)}/logs",
        operation=Operation.TEMPLATE_LOG,
        repeat=Repeat.REFUSED_ONLY,  # reconnection is the build follower's job
        deadline=deadline,
        params={"follow": "true"},
        idle_timeout=STREAM_IDLE_TIMEOUT,
    )


# Files


def write_file(
    t: Transport,
    sandbox_id: str,
    path: str,
    body: Body,
    deadline: Deadline,
    *,
    repeat: Repeat,
    operation: str = Operation.FILE_TRANSFER,
) -> None:
    t.call(
        "PUT",
        f"{_sandbox(sandbox_id)}/files",
        operation=operation,
        repeat=repeat,
        deadline=deadline,
        params={"path": path},
        body=body,
    )


def read_file(t: Transport, sandbox_id: str, path: str, deadline: Deadline) -> Stream:
    return t.stream(
        "GET",
        f"{_sandbox(sandbox_id)}/files",
        operation=Operation.FILE_TRANSFER,
        repeat=Repeat.SAFE,
        deadline=deadline,
        params={"path": path},
        idle_timeout=STREAM_IDLE_TIMEOUT,
    )


def exec_command(
    t: Transport,
    sandbox_id: str,
    cmd: str,
    args: list[str],
    deadline: Deadline,
    *,
    operation: str = Operation.EXEC,
) -> dict[str, Any]:
    """Buffered one-shot exec for housekeeping; its result is ``{exit_code, stdout, stderr}``."""
    reply = t.call(
        "POST",
        f"{_sandbox(sandbox_id)}/exec",
        operation=operation,
        repeat=Repeat.REFUSED_ONLY,
        deadline=deadline,
        json_body={"cmd": cmd, "args": args},
    )
    result = _object(reply.data, operation).get("result")
    return _object(result, operation)


# Managed processes


def create_process(
    t: Transport,
    sandbox_id: str,
    cmd: str,
    args: list[str],
    deadline: Deadline,
    *,
    pty: tuple[int, int] | None = None,
    operation: str = Operation.PROCESS_CREATION,
) -> dict[str, Any]:
    """Create a managed process; with ``pty=(rows, cols)`` it runs on a terminal."""
    body: dict[str, Any] = {"cmd": cmd, "args": args}
    if pty is not None:
        body["pty"] = {"rows": pty[0], "cols": pty[1]}
    reply = t.call(
        "POST",
        f"{_sandbox(sandbox_id)}/processes",
        operation=operation,
        repeat=Repeat.REFUSED_ONLY,
        deadline=deadline,
        json_body=body,
    )
    data = _object(reply.data, operation)
    checked_id(data.get("process_id"), f"process id in the answer to {operation}")
    return data


def list_processes(t: Transport, sandbox_id: str, deadline: Deadline) -> list[dict[str, Any]]:
    """The sandbox's managed processes (their records: ``process_id``, ``args``, ``state``...)."""
    reply = t.call(
        "GET",
        f"{_sandbox(sandbox_id)}/processes",
        operation=Operation.PROCESS_CONTROL,
        repeat=Repeat.SAFE,
        deadline=deadline,
    )
    items, _ = _items(reply.data, Operation.PROCESS_CONTROL, "processes")
    return [_object(item, Operation.PROCESS_CONTROL) for item in items]


def get_process(
    t: Transport, sandbox_id: str, process_id: str, deadline: Deadline
) -> dict[str, Any] | None:
    """The process's record, or None if the service no longer knows it (404)."""
    reply = t.call(
        "GET",
        _process(sandbox_id, process_id),
        operation=Operation.PROCESS_CONTROL,
        repeat=Repeat.SAFE,
        deadline=deadline,
        allow=frozenset({404}),
    )
    return None if reply.status == 404 else _object(reply.data, Operation.PROCESS_CONTROL)


def connect_output(
    t: Transport, sandbox_id: str, process_id: str, after: int, deadline: Deadline
) -> Stream:
    """The NDJSON output stream, replaying from sequence ``after + 1``."""
    return t.stream(
        "GET",
        f"{_process(sandbox_id, process_id)}/connect",
        operation=Operation.OUTPUT_CONNECTION,
        repeat=Repeat.REFUSED_ONLY,  # reconnection is the follower's job: one retry layer
        deadline=deadline,
        params={"after": str(after)},
        idle_timeout=STREAM_IDLE_TIMEOUT,
    )


def wait_process(
    t: Transport, sandbox_id: str, process_id: str, timeout_ms: int, deadline: Deadline
) -> dict[str, Any] | None:
    """Long-poll until the process's whole tree has exited and return its record; None
    when ``timeout_ms`` passed first (408: "not yet", never retried by the transport)."""
    reply = t.call(
        "GET",
        f"{_process(sandbox_id, process_id)}/wait",
        operation=Operation.PROCESS_CONTROL,
        repeat=Repeat.SAFE,
        deadline=deadline,
        params={"scope": "tree", "timeout_ms": str(max(0, timeout_ms))},
        allow=frozenset({408}),
    )
    return None if reply.status == 408 else _object(reply.data, Operation.PROCESS_CONTROL)


def close_stdin(t: Transport, sandbox_id: str, process_id: str, deadline: Deadline) -> None:
    """Close the process's stdin; 409 (already closed) is fine."""
    t.call(
        "POST",
        f"{_process(sandbox_id, process_id)}/stdin/close",
        operation=Operation.PROCESS_CONTROL,
        repeat=Repeat.SAFE,
        deadline=deadline,
        allow=frozenset({409}),
    )


def send_input(
    t: Transport, sandbox_id: str, process_id: str, data: bytes, deadline: Deadline
) -> None:
    t.call(
        "POST",
        f"{_process(sandbox_id, process_id)}/input",
        operation=Operation.PROCESS_CONTROL,
        repeat=Repeat.REFUSED_ONLY,
        deadline=deadline,
        json_body={"data_base64": base64.b64encode(data).decode("ascii")},
    )


def resize_terminal(
    t: Transport, sandbox_id: str, process_id: str, rows: int, cols: int, deadline: Deadline
) -> None:
    """Set a terminal process's size (the same size twice is harmless: PUT-like)."""
    t.call(
        "POST",
        f"{_process(sandbox_id, process_id)}/resize",
        operation=Operation.PROCESS_CONTROL,
        repeat=Repeat.SAFE,
        deadline=deadline,
        json_body={"rows": rows, "cols": cols},
    )


def terminate_process(
    t: Transport, sandbox_id: str, process_id: str, grace: float, deadline: Deadline
) -> dict[str, Any] | None:
    """Terminate the process tree: one request, never repeated except after 429.

    Returns the process record, or None for 404 (already gone). The caller
    decides on retrying: the containment rule allows exactly one more try.
    """
    reply = t.call(
        "DELETE",
        _process(sandbox_id, process_id),
        operation=Operation.PROCESS_CLEANUP,
        repeat=Repeat.REFUSED_ONLY,
        deadline=deadline,
        params={"grace_ms": str(max(0, round(grace * 1000)))},
        allow=frozenset({404}),
    )
    return None if reply.status == 404 else _object(reply.data, Operation.PROCESS_CLEANUP)


# Any other endpoint


def request(
    t: Transport,
    method: str,
    path: str,
    deadline: Deadline,
    *,
    json_body: Any = None,
    params: dict[str, str] | None = None,
) -> Any:
    """One request to an endpoint this module does not wrap (``path`` is checked by the
    caller); retried as its method allows. Returns the envelope's ``data``."""
    reply = t.call(
        method,
        path,
        operation=Operation.REQUEST,
        repeat=Repeat.SAFE if method in IDEMPOTENT_METHODS else Repeat.REFUSED_ONLY,
        deadline=deadline,
        params=params,
        json_body=json_body,
    )
    return reply.data
