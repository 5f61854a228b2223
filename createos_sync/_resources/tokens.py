"""Sandbox access tokens: the plaintext comes back once, as a masked ``AccessToken``.

A token is a key for one sandbox: ``Client(api_key=token)`` drives that
sandbox, and the service answers 404 for any other. It is handed to the
caller and never kept by the package (not in the lease journal, not in a
log line); the lease remembers only that it made one, to disable it when it
leaves the sandbox running.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._wire import api as _api
from .._wire.deadline import Deadline
from .._wire.http import Transport
from ..config import validate_api_key
from ..errors import ConfigError, ProtocolError
from ..models import AccessToken


def create(t: Transport, sandbox_id: str, deadline: Deadline) -> AccessToken:
    """A new token of ``sandbox_id``: 1 request, never repeated after a lost answer."""
    return plaintext(_api.create_access_token(t, sandbox_id, deadline))


def rotate(t: Transport, sandbox_id: str, deadline: Deadline) -> AccessToken:
    """Replace the token of ``sandbox_id`` (the old one stops working); 1 request."""
    return plaintext(_api.rotate_access_token(t, sandbox_id, deadline))


def plaintext(answer: Mapping[str, Any]) -> AccessToken:
    """The token of a creation or rotation answer, checked to be usable as a key."""
    value = answer.get("token")
    try:
        return AccessToken(validate_api_key(value if isinstance(value, str) else None))
    except ConfigError:
        raise ProtocolError("the answer holds no usable access token") from None
