"""The lease's private networks: join, leave, its ip on one (engine: ``_resources.networks``)."""

from __future__ import annotations

from .._resources import checks
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

    def create_network(self, name: str) -> Network:
        """A new private network called ``name``, owned by this lease, with the sandbox
        joined to it: other leases join it with ``lease(networks=[net])``.

        When the lease destroys its sandbox, it leaves the network, then deletes it
        (asking again for up to 30 s while the service says it is still in use: close
        the leases that joined it first, as nested ``with`` blocks do).

        The network is journaled with the lease's sandbox: after a crash (SIGKILL),
        ``reap`` and the auto-reap delete it with the sandbox.

        Request budget: 2 (the creation and the join; neither repeated after a lost
        answer), and at close 1 leave plus 1 delete (and 1 per "in use" answer).

        Raises:
            ValueError: ``name`` is not 1..63 letters, digits, '.', '_' and '-'.
        """
        checked = checks.network_name(name)
        box = self._usable_box()
        deadline = self._op_deadline()
        made = Network.from_api(_api.create_network(box.transport, checked, deadline))
        with self._attached.lock:
            self._attached.made_networks.append(made.id)
        self._record.network_made(made.id)  # a crash from here on leaves it to reap
        _api.attach_network(box.transport, box.sandbox_id, made.id, deadline)
        self._attached.add_network(made.id)
        return made

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
