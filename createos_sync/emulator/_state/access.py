"""Sandbox access tokens, SSH keys and bandwidth quotas.

A token is a key for one sandbox: the app lets it act on that sandbox's
endpoints only, and answers 404 for any other sandbox, as the service
does. Only a digest of each token is kept; its plaintext is in the answer
that made it and nowhere else. Rotating replaces the digest (the old token
stops working at once); disabling drops it; a destroyed sandbox's token
goes with it. Bandwidth is not metered here: usage stays 0.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

from .._wire import ApiError, timestamp
from .sandbox import Sandbox

TOKEN_PREFIX = "sbt_"
DEFAULT_QUOTA = 100 << 30


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "replace")).digest()


@dataclass
class TokenRecord:
    digest: bytes
    hint: str
    created_at: float
    rotated_at: float | None = None


class AccessStore:
    """Tokens (as digests), SSH keys and quotas, per sandbox; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: dict[str, TokenRecord] = {}
        self._quotas: dict[str, int] = {}

    # -- tokens --------------------------------------------------------------

    def create(self, sandbox_id: str, *, rotate: bool) -> dict[str, Any]:
        """A new token for the sandbox; the answer is the only place its plaintext is."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = time.time()
        with self._lock:
            old = self._tokens.get(sandbox_id)
            if rotate and old is None:
                raise ApiError(404, "the sandbox has no access token to rotate")
            if not rotate and old is not None:
                raise ApiError(409, "the sandbox has an access token: rotate or disable it")
            hint = f"{TOKEN_PREFIX}...{token[-4:]}"
            created = old.created_at if old else now
            record = TokenRecord(_digest(token), hint, created, now if rotate else None)
            self._tokens[sandbox_id] = record
        return {"token": token, **self._describe(record)}

    def describe(self, sandbox_id: str) -> dict[str, Any]:
        with self._lock:
            record = self._tokens.get(sandbox_id)
        if record is None:
            return {"enabled": False, "token_hint": None, "created_at": None, "rotated_at": None}
        return self._describe(record)

    def disable(self, sandbox_id: str) -> dict[str, Any]:
        with self._lock:
            self._tokens.pop(sandbox_id, None)
        return self.describe(sandbox_id)

    def sandbox_of(self, key: str) -> str | None:
        """The sandbox a token acts for, or None if it is no live token."""
        digest = _digest(key)
        with self._lock:
            found = [s for s, r in self._tokens.items() if hmac.compare_digest(r.digest, digest)]
        return found[0] if found else None

    @staticmethod
    def _describe(record: TokenRecord) -> dict[str, Any]:
        return {"enabled": True, "token_hint": record.hint,
                "created_at": timestamp(record.created_at),
                "rotated_at": timestamp(record.rotated_at)}  # fmt: skip

    # -- SSH keys and bandwidth ------------------------------------------------

    def add_keys(self, sandbox: Sandbox, keys: list[str]) -> int:
        """Add keys the sandbox does not have yet (its view lists them); how many it has."""
        with sandbox.lock:
            known = sandbox.ssh_pubkeys
            known.extend(k for k in dict.fromkeys(keys) if k not in known)
            return len(known)

    def bandwidth(self, sandbox_id: str, add: int = 0) -> dict[str, Any]:
        with self._lock:
            quota = self._quotas.get(sandbox_id, DEFAULT_QUOTA) + add
            self._quotas[sandbox_id] = quota
        return {"id": sandbox_id, "quota_bytes": quota, "used_bytes": 0, "ingress_bytes": 0,
                "remaining_bytes": quota, "capped": False}  # fmt: skip

    def set_quota(self, sandbox_id: str, quota: int) -> None:
        with self._lock:
            self._quotas[sandbox_id] = quota

    def forget(self, sandbox_id: str) -> None:
        with self._lock:
            self._tokens.pop(sandbox_id, None)
            self._quotas.pop(sandbox_id, None)
