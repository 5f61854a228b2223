"""One function per CreateOS endpoint: the only place paths and wire field names live.

Functions take a ``Transport`` and a ``Deadline``, and return decoded JSON
(``dict``) or a ``Stream``. Details PROTOCOL.md marks as inferred each sit in
exactly one function here. The endpoints are grouped by resource in the
modules of this package; callers use them through it (``_api.get_sandbox``).
"""

from __future__ import annotations

from .common import PAGE_LIMIT, STREAM_IDLE_TIMEOUT
from .processes import (
    close_stdin,
    connect_output,
    create_process,
    exec_command,
    get_process,
    list_processes,
    read_file,
    resize_terminal,
    send_input,
    terminate_process,
    wait_process,
    write_file,
)
from .raw import request
from .sandboxes import (
    create_sandbox,
    delete_sandbox,
    fork_sandbox,
    get_egress,
    get_sandbox,
    list_rootfs,
    list_sandboxes,
    list_shapes,
    put_egress,
    reports_forks,
    request_transition,
    sandbox_name,
    set_auto_pause,
    set_ingress,
)
from .templates import (
    create_template,
    delete_template,
    follow_template_log,
    get_template,
    list_templates,
)

__all__ = [
    "PAGE_LIMIT",
    "STREAM_IDLE_TIMEOUT",
    "close_stdin",
    "connect_output",
    "create_process",
    "create_sandbox",
    "create_template",
    "delete_sandbox",
    "delete_template",
    "exec_command",
    "follow_template_log",
    "fork_sandbox",
    "get_egress",
    "get_process",
    "get_sandbox",
    "get_template",
    "list_processes",
    "list_rootfs",
    "list_sandboxes",
    "list_shapes",
    "list_templates",
    "put_egress",
    "read_file",
    "reports_forks",
    "request",
    "request_transition",
    "resize_terminal",
    "sandbox_name",
    "send_input",
    "set_auto_pause",
    "set_ingress",
    "terminate_process",
    "wait_process",
    "write_file",
]
