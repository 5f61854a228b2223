"""Files, the one-shot exec, and managed processes."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from ...errors import Operation
from ..deadline import Deadline
from ..http import Body, Stream, Transport
from ..retry import Repeat
from ..server_text import checked_id
from .common import STREAM_IDLE_TIMEOUT, _items, _object, _process, _sandbox

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
    secrets: Sequence[str] = (),
) -> dict[str, Any]:
    """Create a managed process; with ``pty=(rows, cols)`` it runs on a terminal.

    ``secrets``: what the ``args`` carry inside them (env values, argv items), that no
    server text shown from the answer may hold either.
    """
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
        secrets=secrets,
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
    t: Transport,
    sandbox_id: str,
    process_id: str,
    data: bytes,
    deadline: Deadline,
    *,
    secrets: Sequence[str] = (),
) -> None:
    """Write ``data`` to the process's stdin; ``secrets``: what ``data`` carries (env
    values, argv items) that no server text shown from the answer may hold."""
    t.call(
        "POST",
        f"{_process(sandbox_id, process_id)}/input",
        operation=Operation.PROCESS_CONTROL,
        repeat=Repeat.REFUSED_ONLY,
        deadline=deadline,
        json_body={"data_base64": base64.b64encode(data).decode("ascii")},
        secrets=secrets,
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
