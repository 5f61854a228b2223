"""Who may reach the sandbox: access tokens and SSH keys (engine: ``_resources.tokens``)."""

from __future__ import annotations

from collections.abc import Sequence

from .._resources import checks
from .._resources import tokens as _tokens
from .._wire import api as _api
from ..errors import ProtocolError
from ..models import AccessToken, AccessTokenInfo
from ._core import LeaseCore


class AccessMethods(LeaseCore):
    """A delegated key for this sandbox alone, and SSH keys."""

    def create_access_token(self) -> AccessToken:
        """A new access token for this sandbox: ``Client(api_key=token)`` drives this sandbox
        and nothing else. Its plaintext is shown once (here): keep it like the API key.

        If the lease leaves the sandbox running at close (``"keep"``, ``"pause"``), it
        disables the token it made (1 request); a destroyed sandbox takes it along.

        Request budget: 1 (never repeated after a lost answer: ``rotate_access_token``
        then makes a usable one).
        """
        box = self._usable_box(paused_ok=True)
        token = _tokens.create(box.transport, box.sandbox_id, self._op_deadline())
        self._attached.token = True
        return token

    def rotate_access_token(self) -> AccessToken:
        """Replace the sandbox's token with a new one (the old one stops working); 1 request."""
        box = self._usable_box(paused_ok=True)
        token = _tokens.rotate(box.transport, box.sandbox_id, self._op_deadline())
        self._attached.token = True
        return token

    def disable_access_token(self) -> None:
        """Revoke the sandbox's token (none, or already revoked, is fine); 1 request."""
        box = self._usable_box(paused_ok=True)
        _api.disable_access_token(box.transport, box.sandbox_id, self._op_deadline())
        self._attached.token = False

    def access_token_info(self) -> AccessTokenInfo:
        """Whether the sandbox has a working token, and its hint (never the token); 1 request."""
        box = self._usable_box(paused_ok=True)
        return AccessTokenInfo.from_api(
            _api.get_access_token(box.transport, box.sandbox_id, self._op_deadline())
        )

    def add_ssh_keys(self, keys: Sequence[str]) -> int:
        """Authorise OpenSSH public keys on the sandbox; returns how many it now has.

        Request budget: 1 (repeated only after 429 or 503: a repeat could add twice).

        Raises:
            ValueError: not a non-empty sequence of public key lines (before any request).
        """
        checked = checks.ssh_keys(keys)
        box = self._usable_box()
        count = _api.add_ssh_keys(box.transport, box.sandbox_id, checked, self._op_deadline())
        if isinstance(count, bool) or not isinstance(count, int):
            raise ProtocolError("the answer to adding ssh keys has no key count")
        return count
