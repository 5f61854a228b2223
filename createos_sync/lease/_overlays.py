"""The lease's private networks: join, leave, its ip on one (engine: ``_resources.networks``)."""

from __future__ import annotations

from .._resources import networks as _networks
from .._wire import api as _api
from ..models import Network
from ._core import LeaseCore


class OverlayMethods(LeaseCore):
    """Private networks between sandboxes; the lease takes the sandbox off the networks it
    joined before it destroys it."""

    def attach_network(self, network: Network | str) -> None:
        """Join the running sandbox to ``network`` (a ``Network`` or its id); 1 request.

        Its ip there is in the network's members a moment later (``network_ip``).

        Raises:
            ValueError, TypeError: ``network`` is neither (before any request).
            CreateosApiError: refused, or the outcome is unknown (never sent twice).
        """
        network_id = _networks.network_id(_networks.check_ref(network))
        box = self._usable_box()
        _api.attach_network(box.transport, box.sandbox_id, network_id, self._op_deadline())
        self._attached.add_network(network_id)

    def detach_network(self, network: Network | str) -> bool:
        """Take the sandbox off ``network``; False if it was not a member (1 request)."""
        network_id = _networks.network_id(_networks.check_ref(network))
        box = self._usable_box()
        left = _api.detach_network(box.transport, box.sandbox_id, network_id, self._op_deadline())
        self._attached.drop_network(network_id)
        return left

    def network_ip(self, network: Network | str) -> str | None:
        """The sandbox's ip on ``network``, read afresh from its members (1 request); None
        when it is not (or not yet) a member with an ip. It is not the sandbox's ``ip``."""
        network_id = _networks.network_id(_networks.check_ref(network))
        box = self._usable_box(paused_ok=True)
        found = Network.from_api(_api.get_network(box.transport, network_id, self._op_deadline()))
        return found.members.get(box.sandbox_id)
