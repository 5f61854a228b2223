"""Any other endpoint, for ``Client.request``."""

from __future__ import annotations

from typing import Any

from ...errors import Operation
from ..deadline import Deadline
from ..http import Transport
from ..retry import Repeat
from .common import IDEMPOTENT_METHODS

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
