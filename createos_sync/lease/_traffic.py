"""The sandbox's network: egress rules, ingress and preview URLs, ports, auto-pause.

Why each piece works the way it does:

- A preview URL costs no request: every sandbox record (the creation's
  answer, reads, the PATCH answer) carries ``ingress_url_template``, and the
  lease keeps the last one it saw. The template is server text, so it is
  checked twice: its characters when the record is read (``models``), and
  here the URL it makes (HTTPS, or HTTP to loopback only, ``*.localhost``
  names included; a host; no user information) before a user is handed it
  to open.
- ``wait_for_port`` is one exec of a bash loop that probes ``/dev/tcp``
  inside the sandbox until the port accepts a connection, bounded by
  ``timeout`` (coreutils): one request however long it waits, where probing
  from outside would cost one request per try. It is the official SDK's
  probe. An exec cannot be cancelled, but the loop ends by itself.
- Replacing the egress rules and the PATCH of ingress or auto-pause send
  absolute values: repeating one after a lost answer changes nothing, so
  they are retried like reads (``_api``).
"""

from __future__ import annotations

import math
from urllib.parse import urlsplit

from .._sandboxes.box import Box
from .._wire import api as _api
from .._wire.deadline import Deadline
from .._wire.server_text import PORT_PLACEHOLDER, UNRECOGNISED, egress_rules
from ..config import is_loopback
from ..errors import CreateosError, Operation, OperationTimeout, ProtocolError
from ..models import SandboxInfo
from ._options import check_egress

PROBE_HOST = "127.0.0.1"
PROBE_INTERVAL = 0.2
# How long the exec's answer may take beyond the probe's own limit (start-up, the network).
PROBE_MARGIN = 10.0
TIMEOUT_EXIT = 124  # the status of coreutils' timeout when it ended the command


def check_port(port: object) -> int:
    """A TCP port number, 1..65535."""
    if isinstance(port, bool) or not isinstance(port, int):
        raise TypeError("port must be an int")
    if not 1 <= port <= 65535:
        raise ValueError(f"port must be in 1..65535, not {port}")
    return port


def check_enabled(enabled: object) -> bool:
    if not isinstance(enabled, bool):
        raise TypeError("enabled must be True or False")
    return enabled


def check_rules(rules: object) -> list[str]:
    """Rules for ``set_egress``: None (allow all) is sent as an empty list, which means the same."""
    checked = check_egress(rules)
    return list(checked) if checked is not None else []


def preview_url(info: SandboxInfo | None, port: int) -> str:
    """The public URL of ``port``, made from the last sandbox record seen."""
    if info is None or not info.ingress_enabled:
        raise ValueError(
            "ingress is off for this sandbox: open the lease with ingress=True, "
            "or call set_ingress(True) first"
        )
    template = info.ingress_url_template
    if template is None or template == UNRECOGNISED:
        raise ProtocolError("the service gave no usable ingress URL template for this sandbox")
    url = template.replace(PORT_PLACEHOLDER, str(port))
    _check_url(url)
    return url


def _check_url(url: str) -> None:
    """A URL a user may open: HTTPS (HTTP to loopback only), a host, no user information."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise ProtocolError("the ingress URL template does not make a valid URL") from None
    secure = parts.scheme == "https" or (parts.scheme == "http" and _loopback_name(host))
    if not host or not secure:
        raise ProtocolError("the ingress URL template does not make an https URL with a host")
    if parts.username is not None or parts.password is not None:
        raise ProtocolError("the ingress URL template holds user information")


def _loopback_name(host: str) -> bool:
    """A loopback host, or a name under ``localhost``: RFC 6761 keeps those on loopback,
    and browsers resolve them so (the emulator's preview hosts)."""
    return is_loopback(host) or host.lower().endswith(".localhost")


def read_egress(box: Box, deadline: Deadline) -> list[str]:
    return _rules(_api.get_egress(box.transport, box.sandbox_id, deadline))


def replace_egress(box: Box, rules: list[str], deadline: Deadline) -> list[str]:
    return _rules(_api.put_egress(box.transport, box.sandbox_id, rules, deadline))


def _rules(value: object) -> list[str]:
    if value is None:  # no rules: everything is allowed
        return []
    rules = egress_rules(value)
    if rules is None:
        raise ProtocolError("the egress rules in the answer are not a list")
    return rules


def set_ingress(box: Box, enabled: bool, deadline: Deadline) -> SandboxInfo:
    return SandboxInfo.from_api(_api.set_ingress(box.transport, box.sandbox_id, enabled, deadline))


def set_auto_pause(box: Box, seconds: int | None, deadline: Deadline) -> SandboxInfo:
    return SandboxInfo.from_api(
        _api.set_auto_pause(box.transport, box.sandbox_id, seconds, deadline)
    )


def probe_script(port: int, seconds: int) -> str:
    """The bash loop: try a connection every PROBE_INTERVAL until one succeeds or time is up."""
    loop = f"until (: > /dev/tcp/{PROBE_HOST}/{port}) 2>/dev/null; do sleep {PROBE_INTERVAL}; done"
    return f"timeout {seconds} bash -c '{loop}'"


def wait_for_port(box: Box, port: int, timeout: float) -> None:
    """Return once something accepts connections on ``port`` inside the sandbox."""
    seconds = max(1, math.ceil(timeout))  # timeout(1) and the loop count whole seconds
    result = _api.exec_command(
        box.transport,
        box.sandbox_id,
        "bash",
        ["-c", probe_script(port, seconds)],
        box.deadline(seconds + PROBE_MARGIN),
        operation=Operation.PORT_WAIT,
    )
    status = result.get("exit_code")
    if status == 0:
        return
    if status == TIMEOUT_EXIT:
        raise OperationTimeout(
            f"waiting for port {port}", seconds, "nothing accepted connections on it in the sandbox"
        )
    shown = status if isinstance(status, int) and not isinstance(status, bool) else "unknown"
    raise CreateosError(
        f"the port probe could not run in the sandbox (exit status {shown}): "
        "it needs bash and timeout (coreutils)"
    )
