"""Private networks: naming one, a member's ip, and deleting one that was just in use.

Deleting a network can fail ("in use", 409) for a few seconds after its
members were destroyed or detached (the service tears the overlay down
asynchronously): ``delete`` asks again, backing off, for at most
``IN_USE_WAIT`` seconds, and says so if it is still in use then.
"""

from __future__ import annotations

from .._wire import api as _api
from .._wire import retry as _retry
from .._wire.deadline import Deadline
from .._wire.http import Transport
from ..errors import CreateosApiError, Operation, OperationTimeout
from ..models import Network
from . import checks

NetworkRef = Network | str
IN_USE_WAIT = 30.0


def check_ref(network: object) -> NetworkRef:
    """A ``Network`` or a network id."""
    if isinstance(network, Network):
        return network
    if isinstance(network, str):
        return checks.identifier("network id", network)
    raise TypeError("network must be a Network or a network id")


def network_id(network: NetworkRef) -> str:
    return network.id if isinstance(network, Network) else network


def delete(transport: Transport, network_id: str, deadline: Deadline, sleep: _retry.Sleep) -> bool:
    """Delete a network, asking again while it is in use (for at most ``IN_USE_WAIT`` s).

    True when this call deleted it, False when the service did not know it (404).
    Request budget: 1, plus 1 per retry while the service answers 409.
    """
    wait = Deadline.after(min(IN_USE_WAIT, deadline.remaining()))
    try:
        status = _retry.poll(
            lambda: _api.delete_network(transport, network_id, deadline),
            lambda status: status != 409,
            deadline=wait,
            operation=Operation.NETWORK_MANAGEMENT,
            sleep=sleep,
            first=0.25,
        )
    except OperationTimeout:
        raise CreateosApiError(
            Operation.NETWORK_MANAGEMENT,
            409,
            detail=f"network {network_id} is still in use after {wait.seconds:g} s",
        ) from None
    return status != 404
