"""What a service echoes back alone (a request id, a message) never shows the key, an env
value or an argv item that the request carried inside a longer string (issue 22)."""

from __future__ import annotations

import json

import pytest

import createos_sync as cs
from createos_sync import Client

from .wire import KEY, SANDBOX, Service

TOKEN = "tok-9f8e7d6c5b4a"  # an env value of the caller's


@pytest.mark.parametrize("echoed", [KEY, "r-" + KEY, TOKEN])
def test_a_request_id_holding_the_key_or_a_sent_value_is_replaced(
    client: Client, service: Service, echoed: str
) -> None:
    service.add("POST", "/sandboxes", 400, headers={"X-Request-Id": echoed})
    with pytest.raises(cs.CreateosApiError) as caught:
        client.lease(env={"TOKEN": TOKEN}, ttl=None, journal=False).open()
    error = caught.value
    assert error.request_id == "(unrecognised)"
    assert KEY not in str(error) + repr(error) and TOKEN not in str(error)


def test_an_env_value_or_argv_item_echoed_alone_is_scrubbed(
    client: Client, service: Service
) -> None:
    service.create_sandbox("running")
    message = f"env TOKEN={TOKEN} is not declared at creation; bad arg hunter2-x"
    echo = {"status": "fail", "data": None, "message": message}
    service.add("POST", f"/sandboxes/{SANDBOX}/processes", 400, body=json.dumps(echo).encode())
    service.destroy_sandbox()
    with client.lease(ttl=None, journal=False) as box, pytest.raises(cs.CreateosApiError) as caught:
        box.run(["echo", "hunter2-x"], env={"TOKEN": TOKEN})
    shown = str(caught.value)
    assert TOKEN not in shown and "hunter2-x" not in shown, shown
    assert "is not declared at creation" in shown  # the rest of the message stays
