"""Private networks end to end: two sandboxes exchange data at their member ips."""

from __future__ import annotations

import pytest

import createos_sync as cs
from createos_sync import Client
from createos_sync.emulator import Emulator

from .helpers import operations

# A one-line "database": answers every connection with what was stored, forever.
SERVER = (
    "import socket\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('0.0.0.0', 5433)); s.listen()\n"
    "while True:\n"
    "    c, _ = s.accept(); c.sendall(open('/workspace/db').read().encode()); c.close()\n"
)
CLIENT = "import socket, sys; print(socket.create_connection((sys.argv[1], 5433), 5).recv(99))"


def new_network(client: Client, name: str) -> cs.Network:
    """A network, or a skip where the emulator cannot wire one (no iproute2: it says so)."""
    try:
        return client.create_network(name)
    except cs.CreateosApiError as exc:
        if exc.status == 501:
            pytest.skip(str(exc))
        raise


def test_two_sandboxes_exchange_data_over_their_network(client: Client, emulator: Emulator) -> None:
    net = new_network(client, "app-db")
    try:
        with client.lease(networks=[net]) as db, client.lease() as app:
            emulator.clear_request_log()
            app.attach_network(net)
            assert operations(emulator) == [("network.attach", 200)]
            db.write_file("/workspace/db", b"rows: 3")
            db.start(["python3", "-c", SERVER])
            db.wait_for_port(5433)
            ip = db.network_ip(net)
            assert ip is not None and ip != db.info().ip  # the member ip, not the sandbox's
            assert client.network(net).members == {db.id: ip, app.id: app.network_ip(net)}
            answer = app.run(["python3", "-c", CLIENT, ip], check=True)
            assert answer.stdout == "b'rows: 3'\n"
    finally:
        assert client.delete_network(net) is True  # once both are gone (it retries 409s)
    assert client.networks() == []


def test_close_leaves_the_networks_it_joined_and_delete_retries_while_in_use(
    client: Client, emulator: Emulator
) -> None:
    net = new_network(client, "short-lived")
    box = client.lease(networks=[net.id], ttl=None).open()
    emulator.clear_request_log()
    box.close()
    assert operations(emulator) == [("network.detach", 200), ("sandbox.delete", 200)]
    emulator.clear_request_log()
    assert client.delete_network(net) is True
    statuses = [status for _, status in operations(emulator)]
    assert statuses[-1] == 200 and set(statuses[:-1]) <= {409}  # in use for a moment


def test_detach_and_an_unknown_network(client: Client) -> None:
    net = new_network(client, "solo")
    try:
        with client.lease() as box:
            box.attach_network(net)
            assert box.detach_network(net) is True
            assert box.network_ip(net) is None
            assert box.detach_network(net) is False
            with pytest.raises(cs.CreateosApiError) as caught:
                box.attach_network("net_unknown")
            assert caught.value.status == 404
    finally:
        client.delete_network(net)


def test_network_arguments_are_checked_before_any_request(
    client: Client, emulator: Emulator
) -> None:
    emulator.clear_request_log()
    with pytest.raises(ValueError, match=r"a network name is 1\.\.63 letters"):
        client.create_network("has space")
    with pytest.raises(TypeError, match="network must be a Network or a network id"):
        client.lease(networks=[3])  # type: ignore[list-item]
    with pytest.raises(
        ValueError, match="networks must be a sequence of Network objects or network ids"
    ):
        client.lease(networks="net_1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'not-an-ip' is not an IP address"):
        client.sandbox_by_ip("not-an-ip")
    assert emulator.request_log == []


def test_a_network_the_lease_made_is_deleted_after_its_sandbox(
    client: Client, emulator: Emulator
) -> None:
    with client.lease() as db:
        try:
            net = db.create_network("made-by-db")
        except cs.CreateosApiError as exc:
            if exc.status == 501:
                pytest.skip(str(exc))
            raise
        with client.lease(networks=[net]) as app:
            assert set(client.network(net).members) == {db.id, app.id}
        emulator.clear_request_log()
    ops = operations(emulator)
    assert ops[:2] == [("network.detach", 200), ("sandbox.delete", 200)]
    assert ops[-1] == ("network.delete", 200) and set(ops[2:-1]) <= {("network.delete", 409)}
    assert client.networks() == []


def test_a_paused_lease_still_closes_cleanly_off_its_network(
    client: Client, emulator: Emulator
) -> None:
    net = new_network(client, "paused-member")
    box = client.lease(networks=[net], ttl=None).open()
    box.pause()
    emulator.clear_request_log()
    box.close()  # the service detaches running sandboxes only: the destroy takes it off
    assert operations(emulator) == [("network.detach", 409), ("sandbox.delete", 200)]
    assert client.delete_network(net) is True
