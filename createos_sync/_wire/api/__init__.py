"""One function per CreateOS endpoint: the only place paths and wire field names live.

Functions take a ``Transport`` and a ``Deadline``, and return decoded JSON
(``dict``) or a ``Stream``. Details PROTOCOL.md marks as inferred each sit in
exactly one function here. The endpoints are grouped by resource in the
modules of this package; callers use them through it (``_api.get_sandbox``).
"""

from __future__ import annotations

from .access import (
    add_ssh_keys,
    create_access_token,
    disable_access_token,
    get_access_token,
    get_bandwidth,
    recharge_bandwidth,
    resize_disk,
    rotate_access_token,
    sandbox_by_ip,
)
from .common import PAGE_LIMIT, STREAM_IDLE_TIMEOUT
from .disks import (
    attach_disk,
    create_disk,
    delete_disk,
    detach_disk,
    get_disk,
    list_disks,
    list_sandbox_disks,
    rotate_disk_credentials,
)
from .networks import (
    attach_network,
    create_network,
    delete_network,
    detach_network,
    get_network,
    list_networks,
)
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
    "add_ssh_keys",
    "attach_disk",
    "attach_network",
    "close_stdin",
    "connect_output",
    "create_access_token",
    "create_disk",
    "create_network",
    "create_process",
    "create_sandbox",
    "create_template",
    "delete_disk",
    "delete_network",
    "delete_sandbox",
    "delete_template",
    "detach_disk",
    "detach_network",
    "disable_access_token",
    "exec_command",
    "follow_template_log",
    "fork_sandbox",
    "get_access_token",
    "get_bandwidth",
    "get_disk",
    "get_egress",
    "get_network",
    "get_process",
    "get_sandbox",
    "get_template",
    "list_disks",
    "list_networks",
    "list_processes",
    "list_rootfs",
    "list_sandbox_disks",
    "list_sandboxes",
    "list_shapes",
    "list_templates",
    "put_egress",
    "read_file",
    "recharge_bandwidth",
    "reports_forks",
    "request",
    "request_transition",
    "resize_disk",
    "resize_terminal",
    "rotate_access_token",
    "rotate_disk_credentials",
    "sandbox_by_ip",
    "sandbox_name",
    "send_input",
    "set_auto_pause",
    "set_ingress",
    "terminate_process",
    "wait_process",
    "write_file",
]
